"""A consumer: finds each partition's leader, starts at the earliest or latest offset (LIST_OFFSETS), and
long-polls FETCH (sessionless, read up to the HW, or with read_committed up to the last stable offset),
following leader changes. Transaction markers (control batches) are never delivered; with read_committed
the batches of aborted transactions are skipped as Kafka's consumer does (the FETCH answer's
``aborted_transactions``, each in effect from its ``first_offset`` until its producer's abort marker)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from kit.cluster_client import ClientError, ClusterClient
from kit.group_member import GroupMember
from protocol import (
    CONSUMER_REPLICA_ID,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ApiKeys,
    ConnectionClosed,
    Errors,
    decode_records,
    error_name,
    iter_batches,
)

log = logging.getLogger(__name__)

_TRANSACTIONAL_BIT = 0x10  # a batch's attributes bit 4
_CONTROL_BIT = 0x20  # bit 5: a transaction marker


def _is_abort_marker(data: bytes, pos: int) -> bool:
    """A control batch's record key is ``{version int16, type int16}``: type 0 abort, 1 commit."""
    _, records = decode_records(data, pos)
    key = records[0].key if records else None
    return key is not None and len(key) >= 4 and int.from_bytes(key[2:4], "big") == 0


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


class Consumer:
    def __init__(
        self,
        client: ClusterClient,
        topic: str,
        *,
        from_beginning: bool,
        max_wait_ms: int = 500,
        partition_max_bytes: int = 1048576,
        partition: int | None = None,
        offset: int | None = None,
        group: GroupMember | None = None,
        auto_commit_interval_ms: int = 5000,
        isolation_level: int = 0,
    ) -> None:
        """Reads every partition of ``topic``, or only ``partition``; from the earliest offset
        (``from_beginning``) or the latest, or from ``offset`` (of ``partition``). An offset out of range
        starts over at the earliest or the latest, as Kafka's ``auto.offset.reset``."""
        self.client = client
        # In a group (``consume --group``): the partitions are the group's assignment, reading starts at the
        # committed offsets, and positions are committed every ``auto_commit_interval_ms`` and at the end.
        self.group = group
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.topic = topic
        self.from_beginning = from_beginning
        self.partition = partition
        self.offset = offset
        self.max_wait_ms = max_wait_ms
        self.partition_max_bytes = partition_max_bytes
        self.positions: dict[int, int] = {}
        self.high_watermarks: dict[int, int] = {}
        self.consumed = 0
        # 0 read_uncommitted, 1 read_committed (Kafka's IsolationLevel).
        self.isolation_level = isolation_level

    async def _list_offset(self, partition: int, timestamp: int) -> int:
        while True:
            leader = self.client.leader_for((self.topic, partition))
            try:
                conn = await self.client.broker_connection(leader)
                resp = await conn.request(
                    ApiKeys.LIST_OFFSETS,
                    {
                        "replica_id": CONSUMER_REPLICA_ID,
                        "isolation_level": self.isolation_level,
                        "topics": [
                            {
                                "name": self.topic,
                                "partitions": [
                                    {
                                        "partition_index": partition,
                                        "current_leader_epoch": -1,
                                        "timestamp": timestamp,
                                    }
                                ],
                            }
                        ],
                    },
                )
                p = resp["topics"][0]["partitions"][0]
                if p["error_code"] == Errors.NONE:
                    return int(p["offset"])
                log.info("LIST_OFFSETS %s-%d: %s", self.topic, partition, error_name(p["error_code"]))
            except (OSError, ConnectionClosed, trio.TooSlowError) as exc:
                log.info("LIST_OFFSETS %s-%d: %s", self.topic, partition, exc)
            await trio.sleep(0.2)
            await self.client.refresh_metadata([self.topic])

    async def run(
        self,
        on_record: Callable[[ConsumedRecord], None],
        *,
        max_records: int | None = None,
        idle_timeout_ms: int | None = None,
        until_end: bool = False,
    ) -> int:
        """Consumes until ``max_records`` were delivered, nothing arrived for ``idle_timeout_ms``, or (with
        ``until_end``) every partition was read up to the high watermark its leader last reported."""
        if self.group is not None:
            return await self._run_in_group(self.group, on_record, max_records, idle_timeout_ms, until_end)
        partitions = await self.client.topic_partitions(self.topic)
        if self.partition is not None:
            if self.partition not in partitions:
                raise ClientError(
                    f"partition {self.partition} does not exist in {self.topic} (partitions "
                    f"{partitions[0]}..{partitions[-1]})"
                )
            partitions = [self.partition]
        start_ts = EARLIEST_TIMESTAMP if self.from_beginning else LATEST_TIMESTAMP
        for p in partitions:
            if self.offset is not None and p == self.partition:
                self.positions[p] = self.offset
            else:
                self.positions[p] = await self._list_offset(p, start_ts)
        last_data = time.monotonic()
        while max_records is None or self.consumed < max_records:
            if idle_timeout_ms is not None and (time.monotonic() - last_data) * 1000 >= idle_timeout_ms:
                break
            if until_end and self.at_end(partitions):
                break
            if await self._fetch_round(partitions, on_record, max_records):
                last_data = time.monotonic()
        return self.consumed

    async def _fetch_round(
        self, partitions: list[int], on_record: Callable[[ConsumedRecord], None], max_records: int | None
    ) -> int:
        """One FETCH to each leader of ``partitions``, in parallel; the records delivered."""
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            by_leader.setdefault(self.client.leader_for((self.topic, p)), []).append(p)
        results: list[int] = []
        async with trio.open_nursery() as nursery:
            for leader, parts in by_leader.items():
                nursery.start_soon(self._fetch_into, results, leader, parts, on_record, max_records)
        return sum(results)

    async def _run_in_group(
        self,
        group: GroupMember,
        on_record: Callable[[ConsumedRecord], None],
        max_records: int | None,
        idle_timeout_ms: int | None,
        until_end: bool,
    ) -> int:
        """As a group member: reads the assigned partitions from the committed offsets (or, where none is
        committed, from the earliest or latest offset), commits the positions every
        ``auto_commit_interval_ms``, before a rebalance and at the end, and leaves the group."""
        await self.client.topic_partitions(self.topic)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(group.heartbeat_loop)
            partitions: list[int] = []
            try:
                partitions = await self._join(group)
                last_data = last_commit = time.monotonic()
                while max_records is None or self.consumed < max_records:
                    now = time.monotonic()
                    if idle_timeout_ms is not None and (now - last_data) * 1000 >= idle_timeout_ms:
                        break
                    if until_end and partitions and self.at_end(partitions):
                        break
                    if group.rejoin_needed:
                        await group.commit(self.topic, self._positions_of(partitions))
                        partitions = await self._join(group)
                        continue
                    if not partitions:
                        await trio.sleep(0.2)
                        continue
                    if await self._fetch_round(partitions, on_record, max_records):
                        last_data = time.monotonic()
                    if (time.monotonic() - last_commit) * 1000 >= self.auto_commit_interval_ms:
                        await group.commit(self.topic, self._positions_of(partitions))
                        last_commit = time.monotonic()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    if not group.rejoin_needed:
                        await group.commit(self.topic, self._positions_of(partitions))
                    await group.leave()
                nursery.cancel_scope.cancel()
        return self.consumed

    def _positions_of(self, partitions: list[int]) -> dict[int, int]:
        return {p: self.positions[p] for p in partitions if p in self.positions}

    async def _join(self, group: GroupMember) -> list[int]:
        """(Re)joins the group; the partitions of this topic now assigned, positioned to read."""
        assignment = await group.join()
        partitions = sorted(assignment.get(self.topic, []))
        committed = await group.committed(self.topic, partitions) if partitions else {}
        reset = EARLIEST_TIMESTAMP if self.from_beginning else LATEST_TIMESTAMP
        self.positions = {}
        self.high_watermarks = {}
        for p in partitions:
            offset = committed.get(p, -1)
            self.positions[p] = offset if offset >= 0 else await self._list_offset(p, reset)
        return partitions

    def at_end(self, partitions: list[int]) -> bool:
        """Every partition's position is at (or past) the high watermark last reported for it."""
        return all(
            p in self.high_watermarks and self.positions[p] >= self.high_watermarks[p] for p in partitions
        )

    async def _fetch_into(
        self,
        results: list[int],
        leader: int,
        parts: list[int],
        on_record: Callable[[ConsumedRecord], None],
        max_records: int | None,
    ) -> None:
        results.append(await self._fetch(leader, parts, on_record, max_records))

    async def _fetch(
        self,
        leader: int,
        parts: list[int],
        on_record: Callable[[ConsumedRecord], None],
        max_records: int | None,
    ) -> int:
        body = {
            "replica_id": CONSUMER_REPLICA_ID,
            "max_wait_ms": self.max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": self.isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": self.topic,
                    "partitions": [
                        {
                            "partition": p,
                            "current_leader_epoch": -1,
                            "fetch_offset": self.positions[p],
                            "log_start_offset": -1,
                            "partition_max_bytes": self.partition_max_bytes,
                        }
                        for p in parts
                    ],
                }
            ],
            "forgotten_topics_data": [],
        }
        try:
            if leader < 0:
                raise ConnectionClosed("no leader")
            conn = await self.client.broker_connection(leader)
            resp = await conn.request(ApiKeys.FETCH, body, timeout=self.max_wait_ms / 1000 + 30)
        except (OSError, ConnectionClosed, trio.TooSlowError) as exc:
            log.info("fetch from broker %d failed: %s; refreshing metadata", leader, exc)
            await trio.sleep(0.2)
            await self.client.refresh_metadata([self.topic])
            return 0
        got = 0
        refresh = False
        for t in resp.get("responses", []):
            for p in t["partitions"]:
                partition = p["partition_index"]
                code = Errors(p["error_code"])
                if code == Errors.OFFSET_OUT_OF_RANGE:
                    reset = EARLIEST_TIMESTAMP if self.from_beginning else LATEST_TIMESTAMP
                    self.positions[partition] = await self._list_offset(partition, reset)
                    continue
                if code == Errors.TOPIC_AUTHORIZATION_FAILED:
                    # Not retriable (Kafka's consumer raises TopicAuthorizationException).
                    grant = (
                        f"isrsim acl add --allow-principal User:NAME --operation Read --topic {self.topic}"
                    )
                    raise ClientError(
                        f"not authorized to read topic {self.topic!r} (TOPIC_AUTHORIZATION_FAILED): a super "
                        f"user can grant it with `{grant}`"
                    )
                if code != Errors.NONE:
                    refresh = True
                    continue
                end = p.get("high_watermark", -1)
                if self.isolation_level == 1 and p.get("last_stable_offset", -1) >= 0:
                    end = p["last_stable_offset"]
                self.high_watermarks[partition] = int(end)
                aborted = [
                    (int(a["producer_id"]), int(a["first_offset"]))
                    for a in p.get("aborted_transactions") or []
                ]
                got += self._deliver(partition, p["records"], on_record, max_records, aborted)
        if refresh:
            await trio.sleep(0.1)
            await self.client.refresh_metadata([self.topic])
        return got

    def _deliver(
        self,
        partition: int,
        data: bytes,
        on_record: Callable[[ConsumedRecord], None],
        max_records: int | None,
        aborted_transactions: list[tuple[int, int]] | None = None,
    ) -> int:
        got = 0
        position = self.positions[partition]
        # Kafka's consumer: an aborted transaction is in effect from its first offset; its batches are
        # skipped until its producer's abort marker.
        pending_aborts = sorted(aborted_transactions or [], key=lambda a: a[1])
        aborting: set[int] = set()
        for pos, header in iter_batches(data):
            while pending_aborts and pending_aborts[0][1] <= header.last_offset:
                aborting.add(pending_aborts.pop(0)[0])
            if header.attributes & _CONTROL_BIT:
                if header.producer_id in aborting and _is_abort_marker(data, pos):
                    aborting.discard(header.producer_id)
                position = max(position, header.next_offset)
                continue
            if header.last_offset < position:
                continue
            if (
                self.isolation_level == 1
                and header.attributes & _TRANSACTIONAL_BIT
                and header.producer_id in aborting
            ):
                position = header.next_offset
                continue
            _, records = decode_records(data, pos)
            for r in records:
                offset = header.base_offset + r.offset_delta
                if offset < position:
                    continue
                if max_records is not None and self.consumed >= max_records:
                    self.positions[partition] = position
                    return got
                on_record(
                    ConsumedRecord(
                        self.topic,
                        partition,
                        offset,
                        r.key,
                        r.value,
                        header.base_timestamp + r.timestamp_delta,
                        tuple(r.headers),
                    )
                )
                position = offset + 1
                self.consumed += 1
                got += 1
            # As Kafka's consumer: past the whole batch (a compacted batch may end with removed offsets,
            # or hold no record at all).
            position = max(position, header.next_offset)
        self.positions[partition] = position
        return got
