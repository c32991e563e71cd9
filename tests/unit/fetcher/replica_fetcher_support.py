"""Fakes for driving ``fetcher.replica_fetcher.ReplicaFetcher`` without sockets.

* ``FakeLeader`` duck-types ``protocol.client.KafkaConnection.request``. It answers OFFSET_FOR_LEADER_EPOCH,
  FETCH and LIST_OFFSETS from real ``Log``s (with their real ``LeaderEpochFileCache``) and runs FETCH through
  the broker's real ``FetchManager``, so full / incremental sessions and session errors behave as on a
  broker. Any call can be scripted: a queued answer is a response body, an exception to raise, or a
  callable ``(body) -> response body`` (which may change the world while the request is "in flight" and
  then call ``leader.answer(api_key, body)`` for the real answer).
* ``FakeFollowerPartition`` implements ``fetcher.interface.FollowerPartition`` over a real ``Log`` and a
  high watermark field, with the broker's rules (HW clamped to [log start, LEO], log start offset follows
  the leader only up to the HW), and records every truncation.
* ``FakeReplicaManager`` implements ``fetcher.interface.FollowerReplicaManager`` and records fetch errors
  and failed partitions.

The leader's epoch checks mirror ``broker.partition.Partition.check_current_leader_epoch`` (lower ->
FENCED_LEADER_EPOCH, higher -> UNKNOWN_LEADER_EPOCH, -1 -> no check).
"""

from __future__ import annotations

import copy
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from broker.fetch_session import FetchManager, PartitionResponseData
from broker.fetch_session_cache import FetchSessionCache
from broker.log.log import Log, LogConfig
from protocol.api_keys import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_PARTITION_LEADER_EPOCH,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    ApiKeys,
)
from protocol.common import BrokerEndpoint, TopicPartition
from protocol.errors import Errors
from protocol.fetch_request import FetchRequestPartitionData
from protocol.records import build_simple_batch, iter_batches
from protocol.replication import AppendResult

Answer = dict[str, Any] | BaseException | Callable[[dict[str, Any]], dict[str, Any]]

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256)


# ---------------------------------------------------------------------------------------------- logs


def open_log(directory: Path, tp: TopicPartition) -> Log:
    return Log.open(directory / f"{tp[0]}-{tp[1]}", tp[0], tp[1], CONFIG)


def batch(count: int, tag: int) -> bytes:
    """``count`` records whose values are derived from ``tag`` (same tag, same bytes)."""
    return build_simple_batch(
        [f"{tag}:{i}".encode() for i in range(count)], partition_leader_epoch=-1, base_timestamp=1_000
    )


def write(log: Log, epoch: int, count: int, tag: int) -> None:
    """Append one batch of ``count`` records as a leader in ``epoch`` (-1: no epoch, nothing cached)."""
    log.append_as_leader(batch(count, tag), epoch)


def read_all(log: Log) -> bytes:
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 30)
        out += chunk
        offset = [h for _, h in iter_batches(chunk)][-1].next_offset
    return bytes(out)


def batch_ranges(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partition leader epoch) of every batch."""
    return [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in log.batch_headers()]


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()]


# ---------------------------------------------------------------------------------------------- follower


@dataclass
class Truncation:
    kind: str  # "truncate_to" or "truncate_fully_and_start_at"
    offset: int
    reason: str
    leo_before: int
    leo_after: int


class FakeFollowerPartition:
    def __init__(self, log: Log, *, high_watermark: int = 0, leader_epoch: int = 0) -> None:
        self.log = log
        self.hw = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self.epoch = leader_epoch
        self.truncations: list[Truncation] = []
        self.appends: list[AppendResult] = []

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.hw

    @property
    def leader_epoch(self) -> int:
        return self.epoch

    def latest_epoch(self) -> int | None:
        return self.log.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def truncate_to(self, offset: int, reason: str) -> None:
        before = self.log.log_end_offset
        self.log.truncate_to(offset)
        self.hw = min(self.hw, self.log.log_end_offset)
        self.truncations.append(Truncation("truncate_to", offset, reason, before, self.log.log_end_offset))

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        before = self.log.log_end_offset
        self.log.truncate_fully_and_start_at(offset)
        self.hw = offset
        self.truncations.append(
            Truncation("truncate_fully_and_start_at", offset, reason, before, self.log.log_end_offset)
        )

    def append_as_follower(self, records: bytes) -> AppendResult | None:
        info = self.log.append_as_follower(records)
        result = AppendResult(info.first_offset, info.last_offset, info.num_records, info.valid_bytes)
        self.appends.append(result)
        return result

    def update_high_watermark(self, leader_hw: int) -> int:
        self.hw = max(self.log.log_start_offset, min(leader_hw, self.log.log_end_offset))
        return self.hw

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self.log.log_start_offset < leader_log_start_offset <= self.hw:
            self.log.maybe_increment_log_start_offset(leader_log_start_offset)


@dataclass
class FakeReplicaManager:
    broker_id: int = 2
    partitions: dict[TopicPartition, FakeFollowerPartition] = field(default_factory=dict)
    fetch_errors: list[tuple[TopicPartition, int, str]] = field(default_factory=list)
    failed: list[tuple[TopicPartition, str]] = field(default_factory=list)

    def follower_partition(self, tp: TopicPartition) -> FakeFollowerPartition | None:
        return self.partitions.get(tp)

    def on_fetch_error(self, tp: TopicPartition, error_code: int, message: str) -> None:
        self.fetch_errors.append((tp, error_code, message))

    def on_partition_failed(self, tp: TopicPartition, error_code: int, message: str) -> None:
        # As the broker does: a failed partition journals one fetch_error with the error that caused it.
        self.failed.append((tp, message))
        self.fetch_errors.append((tp, error_code, message))

    def error_codes(self, tp: TopicPartition) -> list[int]:
        return [code for t, code, _ in self.fetch_errors if t == tp]


# ---------------------------------------------------------------------------------------------- leader


@dataclass
class SeenRequest:
    api_key: ApiKeys
    body: dict[str, Any]
    at: float  # trio.current_time() when it was sent

    def fetch_partitions(self) -> list[tuple[TopicPartition, int]]:
        """FETCH: (partition, fetch offset) in request order."""
        return [
            ((t["topic"], p["partition"]), p["fetch_offset"])
            for t in self.body["topics"]
            for p in t["partitions"]
        ]

    def forgotten(self) -> list[TopicPartition]:
        return [(t["topic"], p) for t in self.body["forgotten_topics_data"] for p in t["partitions"]]

    def epoch_requests(self) -> list[tuple[TopicPartition, int, int]]:
        """OFFSET_FOR_LEADER_EPOCH: (partition, current_leader_epoch, leader_epoch)."""
        return [
            ((t["topic"], p["partition"]), p["current_leader_epoch"], p["leader_epoch"])
            for t in self.body["topics"]
            for p in t["partitions"]
        ]

    def list_offsets(self) -> list[tuple[TopicPartition, int, int]]:
        """LIST_OFFSETS: (partition, current_leader_epoch, timestamp)."""
        return [
            ((t["name"], p["partition_index"]), p["current_leader_epoch"], p["timestamp"])
            for t in self.body["topics"]
            for p in t["partitions"]
        ]


class FakeLeader:
    def __init__(self, broker_id: int = 1, *, session_slots: int = 10, long_poll: bool = False) -> None:
        self.broker_id = broker_id
        self.endpoint = BrokerEndpoint(broker_id, "leader.invalid", 9092)
        self.logs: dict[TopicPartition, Log] = {}
        self.leader_epochs: dict[TopicPartition, int] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        self.requests: list[SeenRequest] = []
        self.long_poll = long_poll
        self._script: dict[ApiKeys, deque[Answer]] = {}
        self.session_cache = FetchSessionCache(session_slots, 120_000, random.Random(7))
        self.fetch_manager = FetchManager(self.session_cache, lambda: int(trio.current_time() * 1000))
        # The last fetch offset the leader saw for each partition (its view of the follower's LEO).
        self.follower_fetch_offsets: dict[TopicPartition, int] = {}

    def add_partition(self, tp: TopicPartition, log: Log, leader_epoch: int) -> None:
        self.logs[tp] = log
        self.leader_epochs[tp] = leader_epoch

    def high_watermark(self, tp: TopicPartition) -> int:
        return self.high_watermarks.get(tp, self.logs[tp].log_end_offset)

    # -- scripting ---------------------------------------------------------------------------------------
    def script(self, api_key: ApiKeys, *answers: Answer) -> None:
        self._script.setdefault(api_key, deque()).extend(answers)

    def seen(self, api_key: ApiKeys) -> list[SeenRequest]:
        return [r for r in self.requests if r.api_key == api_key]

    @property
    def last(self) -> SeenRequest:
        return self.requests[-1]

    # -- the connection ----------------------------------------------------------------------------------
    async def request(
        self, api_key: int, body: Any, *, api_version: int = 0, timeout: float | None = 30.0
    ) -> dict[str, Any]:
        key = ApiKeys(api_key)
        self.requests.append(SeenRequest(key, copy.deepcopy(body), trio.current_time()))
        await trio.lowlevel.checkpoint()
        queued = self._script.get(key)
        if queued:
            answer = queued.popleft()
            if isinstance(answer, BaseException):
                raise answer
            if callable(answer):
                return answer(body)
            return answer
        resp = self.answer(key, body)
        if key == ApiKeys.FETCH and self.long_poll and not _has_records(resp):
            # A long poll that found nothing (the leader's DelayedFetch expiring).
            await trio.sleep(body["max_wait_ms"] / 1000)
        return resp

    def answer(self, api_key: ApiKeys, body: dict[str, Any]) -> dict[str, Any]:
        if api_key == ApiKeys.OFFSET_FOR_LEADER_EPOCH:
            return self._offset_for_leader_epoch(body)
        if api_key == ApiKeys.FETCH:
            return self._fetch(body)
        if api_key == ApiKeys.LIST_OFFSETS:
            return self._list_offsets(body)
        raise AssertionError(f"the fetcher sent an unexpected {api_key.name}")

    def _check_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> Errors:
        if tp not in self.logs:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        epoch = self.leader_epochs[tp]
        if current_leader_epoch in (NO_PARTITION_LEADER_EPOCH, epoch):
            return Errors.NONE
        return Errors.FENCED_LEADER_EPOCH if epoch > current_leader_epoch else Errors.UNKNOWN_LEADER_EPOCH

    def _offset_for_leader_epoch(self, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["topic"], p["partition"])
                error = self._check_epoch(tp, p["current_leader_epoch"])
                epoch, offset = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
                if error == Errors.NONE:
                    log = self.logs[tp]
                    epoch, offset = log.leader_epoch_cache.end_offset_for(
                        p["leader_epoch"], log.log_end_offset
                    )
                    if offset == UNDEFINED_EPOCH_OFFSET:
                        epoch = UNDEFINED_EPOCH
                parts.append(
                    {
                        "error_code": int(error),
                        "partition": p["partition"],
                        "leader_epoch": epoch,
                        "end_offset": offset,
                    }
                )
            topics.append({"topic": t["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _list_offsets(self, body: dict[str, Any]) -> dict[str, Any]:
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["name"], p["partition_index"])
                error = self._check_epoch(tp, p["current_leader_epoch"])
                offset, epoch = -1, -1
                if error == Errors.NONE:
                    log = self.logs[tp]
                    if p["timestamp"] == EARLIEST_TIMESTAMP:
                        offset = log.log_start_offset
                        found = log.leader_epoch_cache.epoch_for_offset(offset)
                        epoch = -1 if found is None else found
                    elif p["timestamp"] == LATEST_TIMESTAMP:
                        offset = log.log_end_offset
                        epoch = self.leader_epochs[tp]
                    else:
                        error = Errors.UNSUPPORTED_VERSION
                parts.append(
                    {
                        "partition_index": p["partition_index"],
                        "error_code": int(error),
                        "timestamp": -1,
                        "offset": offset,
                        "leader_epoch": epoch,
                    }
                )
            topics.append({"name": t["name"], "partitions": parts})
        return {"topics": topics}

    def _read(
        self, body: dict[str, Any], fetch_data: dict[TopicPartition, FetchRequestPartitionData]
    ) -> dict[TopicPartition, PartitionResponseData]:
        updates: dict[TopicPartition, PartitionResponseData] = {}
        remaining = body["max_bytes"]
        got_data = False
        for tp, data in fetch_data.items():
            error = self._check_epoch(tp, data.current_leader_epoch)
            if error != Errors.NONE:
                updates[tp] = PartitionResponseData(int(error))
                continue
            log = self.logs[tp]
            if not log.log_start_offset <= data.fetch_offset <= log.log_end_offset:
                hw = self.high_watermark(tp)
                updates[tp] = PartitionResponseData(
                    int(Errors.OFFSET_OUT_OF_RANGE), hw, hw, log.log_start_offset, b""
                )
                continue
            records = log.read(
                data.fetch_offset, max(0, min(data.max_bytes, remaining)), min_one_message=not got_data
            )
            remaining -= len(records)
            got_data = got_data or bool(records)
            hw = self.high_watermark(tp)
            updates[tp] = PartitionResponseData(int(Errors.NONE), hw, hw, log.log_start_offset, records)
        return updates

    def _fetch(self, body: dict[str, Any]) -> dict[str, Any]:
        fetch_data = {
            (t["topic"], p["partition"]): FetchRequestPartitionData(
                p["fetch_offset"], p["log_start_offset"], p["partition_max_bytes"], p["current_leader_epoch"]
            )
            for t in body["topics"]
            for p in t["partitions"]
        }
        to_forget = [(t["topic"], p) for t in body["forgotten_topics_data"] for p in t["partitions"]]
        context = self.fetch_manager.new_context(
            body["session_id"], body["session_epoch"], fetch_data, to_forget, body["replica_id"] >= 0
        )
        partitions = dict(context.partitions())
        for tp, pd in partitions.items():
            self.follower_fetch_offsets[tp] = pd.fetch_offset
        data = context.update_and_generate_response_data(self._read(body, partitions))
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), pr in data.responses.items():
            topics.setdefault(topic, []).append(
                {
                    "partition_index": partition,
                    "error_code": pr.error_code,
                    "high_watermark": pr.high_watermark,
                    "last_stable_offset": pr.last_stable_offset,
                    "log_start_offset": pr.log_start_offset,
                    "records": pr.records,
                }
            )
        return {
            "throttle_time_ms": data.throttle_time_ms,
            "error_code": int(data.error_code),
            "session_id": data.session_id,
            "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }


def _has_records(resp: dict[str, Any]) -> bool:
    return any(p["records"] for t in resp["responses"] for p in t["partitions"])


def fetch_response(
    partitions: dict[TopicPartition, dict[str, Any]], *, error_code: int = 0, session_id: int = 0
) -> dict[str, Any]:
    """A hand-made FETCH response body."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), fields in partitions.items():
        entry = {
            "partition_index": partition,
            "error_code": 0,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "records": b"",
        }
        entry.update(fields)
        topics.setdefault(topic, []).append(entry)
    return {
        "throttle_time_ms": 0,
        "error_code": error_code,
        "session_id": session_id,
        "responses": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }
