"""A broker's producer ids for INIT_PRODUCER_ID (Kafka's ``RPCProducerIdManager``).

The broker serves ids from its current block and asks for the next block ahead of time, when 90 % of the
current one is handed out (Kafka's prefetch threshold), and at start. While no block is there an
INIT_PRODUCER_ID is answered COORDINATOR_LOAD_IN_PROGRESS (14), which clients retry (Kafka answers so
rather than REQUEST_TIMED_OUT, which old clients treat as fatal).

Where blocks come from is a ``BlockSource``: on a managed broker ALLOCATE_PRODUCER_IDS to the controller
(:func:`controller_block_source`); on an unmanaged broker (no controller) a file in its log directory,
``producer-id-block.json``, holding the next block's first id, rewritten atomically before each block is
used (:func:`local_block_source`), so no id is handed out twice across restarts either way. Unmanaged
brokers share no allocator, so each takes its ids from a range of its own (``broker_id * 2**31`` onward,
:data:`UNMANAGED_RANGE_SIZE` ids): two of them never hand out the same id, whose batches a replica would
otherwise take for the other producer's retries (DUPLICATE_SEQUENCE answered with the other's offsets).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from protocol.api_keys import ApiKeys
from protocol.common import error_name
from protocol.errors import Errors, KafkaError
from protocol.producer_id_messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from protocol.schema import from_body
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel
from server.producer_ids import EMPTY_BLOCK, ProducerIdsBlock, ProducerIdsRecord, generate_next_block
from storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

PID_PREFETCH_THRESHOLD = 0.90
ITERATION_LIMIT = 3
LOCAL_BLOCK_FILE = "producer-id-block.json"
# An unmanaged broker's ids: [broker_id * UNMANAGED_RANGE_SIZE, (broker_id + 1) * UNMANAGED_RANGE_SIZE).
# Broker ids are int32, so the largest range still ends below 2**62.
UNMANAGED_RANGE_SIZE = 2**31

BlockSource = Callable[[], Awaitable[ProducerIdsBlock | None]]


class ProducerIdManager:
    def __init__(self, broker_id: int, source: BlockSource, *, retry_backoff_s: float = 0.05) -> None:
        self.broker_id = broker_id
        self.source = source
        self.retry_backoff_s = retry_backoff_s
        self._current = EMPTY_BLOCK
        self._next_id = 0
        self._next_block: ProducerIdsBlock | None = None
        self._want = trio.Event()
        self._want.set()  # the first block is asked for at start
        self.blocks_received = 0

    @property
    def current_block(self) -> ProducerIdsBlock:
        return self._current

    @property
    def has_valid_block(self) -> bool:
        return self._next_block is not None or self._next_id <= self._current.last_producer_id

    def generate_producer_id(self) -> int:
        """The next id, or KafkaError(COORDINATOR_LOAD_IN_PROGRESS) while waiting for a block."""
        for _ in range(ITERATION_LIMIT):
            block = self._current
            if block.size > 0 and self._next_id <= block.last_producer_id:
                producer_id = self._next_id
                self._next_id += 1
                if producer_id == block.first_producer_id + int(block.size * PID_PREFETCH_THRESHOLD):
                    self._want.set()
                return producer_id
            if self._next_block is None:
                self._want.set()
                break
            self._current, self._next_block = self._next_block, None
            self._next_id = self._current.first_producer_id
        raise KafkaError(
            Errors.COORDINATOR_LOAD_IN_PROGRESS,
            f"broker {self.broker_id}: producer id block is full, waiting for the next block; retry",
        )

    def _accept(self, block: ProducerIdsBlock) -> bool:
        if block.size <= 0 or block.first_producer_id < 0:
            log.error("broker %d: producer id block %r is not a valid range", self.broker_id, block)
            return False
        if self._current.size > 0 and block.first_producer_id <= self._current.last_producer_id:
            log.error(
                "broker %d: producer id block %r is not after the current one %r",
                self.broker_id,
                block,
                self._current,
            )
            return False
        self._next_block = block
        self.blocks_received += 1
        log.info("broker %d: next producer id block %r", self.broker_id, block)
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetches a block whenever one is wanted and none is waiting, until cancelled."""
        task_status.started()
        while True:
            await self._want.wait()
            if self._next_block is None:
                block = await self.source()
                if block is None or not self._accept(block):
                    await trio.sleep(self.retry_backoff_s)
                    continue
            self._want = trio.Event()


def controller_block_source(
    broker_id: int, channel: ControllerChannel, broker_epoch: Callable[[], int]
) -> BlockSource:
    """Blocks from the controller (ALLOCATE_PRODUCER_IDS); None when it cannot give one now."""

    async def fetch() -> ProducerIdsBlock | None:
        epoch = broker_epoch()
        if epoch < 0:
            return None  # not registered yet
        request = AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch)
        try:
            body = await channel.request(ApiKeys.ALLOCATE_PRODUCER_IDS, request)
            resp = from_body(AllocateProducerIdsResponse, body)
        except CONTROLLER_UNREACHABLE as exc:
            log.info("broker %d: ALLOCATE_PRODUCER_IDS not answered (%r); will retry", broker_id, exc)
            return None
        except KafkaError as exc:
            log.warning("broker %d: ALLOCATE_PRODUCER_IDS answer not understood: %s", broker_id, exc.message)
            return None
        if resp.error_code != Errors.NONE:
            log.info(
                "broker %d: ALLOCATE_PRODUCER_IDS refused: %s; will retry",
                broker_id,
                error_name(resp.error_code),
            )
            return None
        return ProducerIdsBlock(broker_id, resp.producer_id_start, resp.producer_id_len)

    return fetch


def local_block_source(broker_id: int, log_dir: Path) -> BlockSource:
    """Blocks for an unmanaged broker, from ``<log.dirs>/producer-id-block.json``, within the broker's own
    range of ids (a file from before ranges is moved up to the range's start)."""
    path = log_dir / LOCAL_BLOCK_FILE
    range_start = broker_id * UNMANAGED_RANGE_SIZE
    range_end = range_start + UNMANAGED_RANGE_SIZE

    async def allocate() -> ProducerIdsBlock | None:
        try:
            record = ProducerIdsRecord.from_json(json.loads(path.read_text())) if path.exists() else None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error(
                "broker %d: %s cannot be read (%r): no producer ids until it is repaired or removed "
                "(removing it may hand out ids already used)",
                broker_id,
                path,
                exc,
            )
            return None
        record = record or ProducerIdsRecord()
        if record.next_producer_id < range_start:
            record = ProducerIdsRecord(range_start, record.broker_id, record.broker_epoch)
        block, following = generate_next_block(record, broker_id, -1)
        if block.last_producer_id >= range_end:
            log.error(
                "broker %d: its producer id range [%d, %d) is used up: no producer ids",
                broker_id,
                range_start,
                range_end,
            )
            return None
        try:
            write_atomically(path, json.dumps(following.to_json()) + "\n")
        except OSError as exc:
            log.error("broker %d: cannot write %s (%r): no producer ids", broker_id, path, exc)
            return None
        return block

    return allocate


__all__ = [
    "LOCAL_BLOCK_FILE",
    "UNMANAGED_RANGE_SIZE",
    "BlockSource",
    "ProducerIdManager",
    "controller_block_source",
    "local_block_source",
]
