"""An in-memory leader for driving ``ReplicaFetcher`` without sockets (Kafka's ``MockLeaderEndPoint``).

``MockLeaderEndPoint`` implements ``fetcher.leader_endpoint.LeaderEndPoint``. Each partition it leads is a
real ``Log`` (with its real ``LeaderEpochFileCache``) plus the leader's epoch and, optionally, a high
watermark below the log end. FETCH goes through the broker's real ``FetchManager``, so full / incremental
sessions and session errors behave as on a broker.

Every call is recorded (``requests``, with the virtual time it was made at) and any call can be scripted: a
queued answer is the value to return, an exception to raise, or a callable taking the ``SeenRequest`` (which
may change the world while the request is "in flight" and then ask the leader for its real answer with
``answer_fetch`` / ``answer_epoch_end_offsets`` / ``answer_list_offset``). ``connect`` can be scripted to
fail the same way.

The leader checks the follower's ``current_leader_epoch`` like Kafka's ``Partition.checkCurrentLeaderEpoch``:
lower -> FENCED_LEADER_EPOCH, higher -> UNKNOWN_LEADER_EPOCH, -1 -> no check.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.fetch_session import FetchManager, PartitionResponseData
from broker.fetch_session_cache import FetchSessionCache
from fetcher.truncation import EpochData, EpochEndOffset
from protocol.api_keys import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_PARTITION_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    ApiKeys,
)
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.fetch_request import FetchRequestPartitionData
from protocol.messages import (
    FetchRequest,
    FetchRequestPartition,
    FetchResponse,
)
from storage.log import Log

OFLE = ApiKeys.OFFSET_FOR_LEADER_EPOCH
FETCH = ApiKeys.FETCH
LIST_OFFSETS = ApiKeys.LIST_OFFSETS


@dataclass
class SeenRequest:
    """One call the fetcher made: FETCH (``fetch``), OFFSET_FOR_LEADER_EPOCH (``epochs``) or LIST_OFFSETS
    (``list_offset``: partition, current leader epoch, timestamp)."""

    api_key: ApiKeys
    at: float  # trio.current_time() when it was made
    fetch: FetchRequest | None = None
    epochs: dict[TopicPartition, EpochData] = field(default_factory=dict)
    list_offset: tuple[TopicPartition, int, int] | None = None

    @property
    def fetch_request(self) -> FetchRequest:
        assert self.fetch is not None, f"{self.api_key.name} is not a FETCH"
        return self.fetch

    def fetch_partitions(self) -> list[tuple[TopicPartition, int]]:
        """FETCH: (partition, fetch offset) in request order."""
        return [
            ((t.topic, p.partition), p.fetch_offset) for t in self.fetch_request.topics for p in t.partitions
        ]

    def fetch_partition(self, tp: TopicPartition) -> FetchRequestPartition:
        for t in self.fetch_request.topics:
            for p in t.partitions:
                if (t.topic, p.partition) == tp:
                    return p
        raise AssertionError(f"{tp} is not in the request")

    def forgotten(self) -> list[TopicPartition]:
        return [(t.topic, p) for t in self.fetch_request.forgotten_topics_data for p in t.partitions]

    @property
    def session(self) -> tuple[int, int]:
        """FETCH: (session_id, session_epoch)."""
        return self.fetch_request.session_id, self.fetch_request.session_epoch

    def epoch_requests(self) -> list[tuple[TopicPartition, int, int]]:
        """OFFSET_FOR_LEADER_EPOCH: (partition, current_leader_epoch, leader_epoch)."""
        return [(tp, d.current_leader_epoch, d.leader_epoch) for tp, d in self.epochs.items()]


class MockLeaderEndPoint:
    def __init__(
        self,
        broker_id: int = 1,
        *,
        host: str = "leader.invalid",
        port: int = 9092,
        session_slots: int = 10,
        long_poll: bool = False,
    ) -> None:
        self._broker_endpoint = BrokerEndpoint(broker_id, host, port)
        self.logs: dict[TopicPartition, Log] = {}
        self.leader_epochs: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self.requests: list[SeenRequest] = []
        self.connects: list[float] = []
        self.long_poll = long_poll
        self._script: dict[ApiKeys, deque[Any]] = {}
        self._connect_errors: deque[BaseException] = deque()
        self.session_cache = FetchSessionCache(session_slots, 120_000, random.Random(7))
        self.fetch_manager = FetchManager(self.session_cache, lambda: int(trio.current_time() * 1000))
        # The last fetch offset the leader saw for each partition (its view of the follower's LEO).
        self.follower_fetch_offsets: dict[TopicPartition, int] = {}

    @property
    def broker_endpoint(self) -> BrokerEndpoint:
        return self._broker_endpoint

    def add_partition(self, tp: TopicPartition, log: Log, leader_epoch: int) -> None:
        self.logs[tp] = log
        self.leader_epochs[tp] = leader_epoch

    def high_watermark(self, tp: TopicPartition) -> int:
        return self.high_watermarks.get(tp, self.logs[tp].log_end_offset)

    # -- scripting and inspection --------------------------------------------------------------------------
    def script(self, api_key: ApiKeys, *answers: Any) -> None:
        """Queue answers for the next calls of ``api_key``: a value, an exception, or ``(SeenRequest) ->
        value``."""
        self._script.setdefault(api_key, deque()).extend(answers)

    def refuse_connect(self, *errors: BaseException) -> None:
        """Make the next ``connect`` calls raise these."""
        self._connect_errors.extend(errors)

    def seen(self, api_key: ApiKeys) -> list[SeenRequest]:
        return [r for r in self.requests if r.api_key == api_key]

    def kinds(self) -> list[ApiKeys]:
        return [r.api_key for r in self.requests]

    @property
    def last(self) -> SeenRequest:
        return self.requests[-1]

    # -- LeaderEndPoint --------------------------------------------------------------------------------------
    @asynccontextmanager
    async def connect(self) -> AsyncIterator[None]:
        self.connects.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        if self._connect_errors:
            raise self._connect_errors.popleft()
        yield

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        seen = await self._record(SeenRequest(FETCH, trio.current_time(), fetch=request))
        scripted, answer = self._scripted(seen)
        if scripted:
            assert isinstance(answer, FetchResponse)
            return answer
        response = self.answer_fetch(request)
        if self.long_poll and not any(p.records for t in response.responses for p in t.partitions):
            # A long poll that found nothing (the leader's DelayedFetch expiring).
            await trio.sleep(request.max_wait_ms / 1000)
        return response

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, EpochData]
    ) -> dict[TopicPartition, EpochEndOffset]:
        seen = await self._record(SeenRequest(OFLE, trio.current_time(), epochs=dict(partitions)))
        scripted, answer = self._scripted(seen)
        if scripted:
            return dict(answer)
        return self.answer_epoch_end_offsets(partitions)

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    async def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        seen = await self._record(
            SeenRequest(LIST_OFFSETS, trio.current_time(), list_offset=(tp, current_leader_epoch, timestamp))
        )
        scripted, answer = self._scripted(seen)
        if scripted:
            return int(answer)
        return self.answer_list_offset(tp, current_leader_epoch, timestamp)

    async def _record(self, seen: SeenRequest) -> SeenRequest:
        self.requests.append(seen)
        await trio.lowlevel.checkpoint()
        return seen

    def _scripted(self, seen: SeenRequest) -> tuple[bool, Any]:
        queued = self._script.get(seen.api_key)
        if not queued:
            return False, None
        answer = queued.popleft()
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            answer = answer(seen)
        return True, answer

    # -- the leader's real answers -------------------------------------------------------------------------
    def check_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> Errors:
        if tp not in self.logs:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        epoch = self.leader_epochs[tp]
        if current_leader_epoch in (NO_PARTITION_LEADER_EPOCH, epoch):
            return Errors.NONE
        return Errors.FENCED_LEADER_EPOCH if epoch > current_leader_epoch else Errors.UNKNOWN_LEADER_EPOCH

    def answer_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, EpochData]
    ) -> dict[TopicPartition, EpochEndOffset]:
        out: dict[TopicPartition, EpochEndOffset] = {}
        for tp, data in partitions.items():
            error = self.check_epoch(tp, data.current_leader_epoch)
            if error != Errors.NONE:
                out[tp] = EpochEndOffset(int(error), UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
                continue
            log = self.logs[tp]
            epoch, offset = log.leader_epoch_cache.end_offset_for(data.leader_epoch, log.log_end_offset)
            out[tp] = EpochEndOffset(int(Errors.NONE), epoch, offset)
        return out

    def answer_list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        error = self.check_epoch(tp, current_leader_epoch)
        if error != Errors.NONE:
            raise KafkaError(error)
        log = self.logs[tp]
        if timestamp == EARLIEST_TIMESTAMP:
            return log.log_start_offset
        assert timestamp == LATEST_TIMESTAMP, timestamp
        return log.log_end_offset

    def answer_fetch(self, request: FetchRequest) -> FetchResponse:
        fetch_data = {
            (t.topic, p.partition): FetchRequestPartitionData(
                p.fetch_offset, p.log_start_offset, p.partition_max_bytes, p.current_leader_epoch
            )
            for t in request.topics
            for p in t.partitions
        }
        to_forget = [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions]
        context = self.fetch_manager.new_context(
            request.session_id, request.session_epoch, fetch_data, to_forget, request.replica_id >= 0
        )
        partitions = dict(context.partitions())
        for tp, pd in partitions.items():
            self.follower_fetch_offsets[tp] = pd.fetch_offset
        data = context.update_and_generate_response_data(self._read(request.max_bytes, partitions))
        return data.to_response()

    def _read(
        self, max_bytes: int, fetch_data: Mapping[TopicPartition, FetchRequestPartitionData]
    ) -> dict[TopicPartition, PartitionResponseData]:
        updates: dict[TopicPartition, PartitionResponseData] = {}
        remaining = max_bytes
        got_data = False
        for tp, data in fetch_data.items():
            error = self.check_epoch(tp, data.current_leader_epoch)
            if error != Errors.NONE:
                updates[tp] = PartitionResponseData(int(error))
                continue
            log = self.logs[tp]
            hw = self.high_watermark(tp)
            if not log.log_start_offset <= data.fetch_offset <= log.log_end_offset:
                updates[tp] = PartitionResponseData(
                    int(Errors.OFFSET_OUT_OF_RANGE), hw, hw, log.log_start_offset, b""
                )
                continue
            records = log.read(
                data.fetch_offset, max(0, min(data.max_bytes, remaining)), min_one_message=not got_data
            )
            remaining -= len(records)
            got_data = got_data or bool(records)
            updates[tp] = PartitionResponseData(int(Errors.NONE), hw, hw, log.log_start_offset, records)
        return updates


def patch_partition(leader: MockLeaderEndPoint, tp: TopicPartition, **fields: Any) -> Any:
    """A scripted FETCH answer: the leader's real answer with ``tp``'s fields replaced."""

    def answer(seen: SeenRequest) -> FetchResponse:
        response = leader.answer_fetch(seen.fetch_request)
        for t in response.responses:
            for p in t.partitions:
                if (t.topic, p.partition_index) == tp:
                    for name, value in fields.items():
                        setattr(p, name, value)
                    return response
        raise AssertionError(f"{tp} is not in the leader's answer")

    return answer
