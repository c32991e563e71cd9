"""A member of a consumer group (Kafka's classic protocol, as a Kafka consumer's ``ConsumerCoordinator``):
finds the coordinator, joins (KIP-394: a first join gets a member id to join with), runs the range assignor
when it leads, syncs, heartbeats, commits and fetches offsets, and leaves. Used by ``isrsim consume
--group`` (docs/groups.md)."""

from __future__ import annotations

import logging
from typing import Any

import trio

from cli.cluster_client import ClientError, ClusterClient
from protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ApiKeys,
    ConnectionClosed,
    Errors,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    error_name,
    range_assign,
)

log = logging.getLogger(__name__)

JOIN_VERSION = 5
SYNC_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_VERSION = 3
COMMIT_VERSION = 7
FETCH_OFFSETS_VERSION = 5

COORDINATOR_ERRORS = (Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)
REJOIN_ERRORS = (Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID)
NO_ANSWER = (OSError, ConnectionClosed, trio.TooSlowError)


class GroupMember:
    def __init__(
        self,
        client: ClusterClient,
        group_id: str,
        topics: list[str],
        *,
        session_timeout_ms: int = 10000,
        rebalance_timeout_ms: int = 30000,
        heartbeat_interval_ms: int = 3000,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.topics = topics
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.coordinator: int | None = None
        self.member_id = ""
        self.generation = -1
        self.assignment: dict[str, list[int]] = {}
        self.rejoin_needed = True
        self._joining = False

    # ------------------------------------------------------------------ requests to the coordinator

    async def _find_coordinator(self) -> int:
        while True:
            try:
                resp = await self.client.request_any(ApiKeys.FIND_COORDINATOR, {"key": self.group_id})
            except ClientError:
                await trio.sleep(0.5)
                continue
            error = Errors(resp["error_code"])
            if error == Errors.NONE:
                node = int(resp["node_id"])
                if node not in self.client.brokers:
                    await self.client.refresh_metadata(self.topics)
                self.coordinator = node
                return node
            if error == Errors.GROUP_AUTHORIZATION_FAILED:
                raise ClientError(
                    f"not authorized to use group {self.group_id!r} (GROUP_AUTHORIZATION_FAILED)"
                )
            log.info("FindCoordinator for group %s: %s; retrying", self.group_id, error.name)
            await trio.sleep(0.2)

    async def _ask(
        self, api: ApiKeys, body: dict[str, Any], version: int, timeout: float = 10
    ) -> dict[str, Any]:
        """One request to the coordinator (found first if unknown); a lost coordinator is found again."""
        while True:
            coordinator = self.coordinator if self.coordinator is not None else await self._find_coordinator()
            try:
                conn = await self.client.broker_connection(coordinator)
                return await conn.request(api, body, api_version=version, timeout=timeout)
            except NO_ANSWER as exc:
                log.info(
                    "group %s: coordinator %d did not answer %s (%s)",
                    self.group_id,
                    coordinator,
                    api.name,
                    exc,
                )
                self.coordinator = None
                await trio.sleep(0.2)

    def _coordinator_lost(self, error: Errors) -> bool:
        if error in COORDINATOR_ERRORS or error == Errors.COORDINATOR_LOAD_IN_PROGRESS:
            self.coordinator = None if error in COORDINATOR_ERRORS else self.coordinator
            return True
        return False

    # ------------------------------------------------------------------ join and sync

    async def join(self) -> dict[str, list[int]]:
        """Joins (again) until a generation's assignment is received; returns it (topic -> partitions)."""
        self._joining = True
        try:
            while True:
                assignment = await self._join_once()
                if assignment is not None:
                    self.assignment = assignment
                    self.rejoin_needed = False
                    return assignment
                await trio.sleep(0.1)
        finally:
            self._joining = False

    async def _join_once(self) -> dict[str, list[int]] | None:
        body = {
            "group_id": self.group_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocols": [{"name": "range", "metadata": encode_subscription(self.topics)}],
        }
        resp = await self._ask(
            ApiKeys.JOIN_GROUP, body, JOIN_VERSION, timeout=self.rebalance_timeout_ms / 1000 + 10
        )
        error = Errors(resp["error_code"])
        if error == Errors.MEMBER_ID_REQUIRED:
            self.member_id = resp["member_id"]
            return None
        if error == Errors.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if self._coordinator_lost(error) or error == Errors.REBALANCE_IN_PROGRESS:
            return None
        if error != Errors.NONE:
            raise ClientError(f"joining group {self.group_id!r} failed: {error_name(error)}")
        self.member_id = resp["member_id"]
        self.generation = int(resp["generation_id"])
        assignments: list[dict[str, Any]] = []
        if resp["leader"] == self.member_id:
            assignments = await self._assign(resp["members"])
        sync = {
            "group_id": self.group_id,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "assignments": assignments,
        }
        synced = await self._ask(
            ApiKeys.SYNC_GROUP, sync, SYNC_VERSION, timeout=self.rebalance_timeout_ms / 1000 + 10
        )
        error = Errors(synced["error_code"])
        if error == Errors.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error != Errors.NONE:
            if not (self._coordinator_lost(error) or error in REJOIN_ERRORS):
                raise ClientError(f"syncing group {self.group_id!r} failed: {error_name(error)}")
            return None
        got = decode_assignment(bytes(synced["assignment"]))
        log.info("group %s generation %d: assigned %s", self.group_id, self.generation, got)
        return got if got is not None else {}

    async def _assign(self, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The leader's range assignment of every member's subscribed topics."""
        subscriptions = {m["member_id"]: decode_subscription(bytes(m["metadata"])) or [] for m in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts})
        counts: dict[str, int] = {}
        for topic in topics:
            try:
                counts[topic] = len(await self.client.topic_partitions(topic, wait_s=5))
            except ClientError:
                counts[topic] = 0
        plan = range_assign(subscriptions, counts)
        return [{"member_id": m, "assignment": encode_assignment(a)} for m, a in plan.items()]

    # ------------------------------------------------------------------ heartbeats

    async def heartbeat_loop(self) -> None:
        """Heartbeats every ``heartbeat_interval_ms`` while a generation is held; an answer that asks for
        a rebalance sets ``rejoin_needed`` (the consumer then rejoins between fetches)."""
        while True:
            await trio.sleep(self.heartbeat_interval_ms / 1000)
            if self._joining or self.rejoin_needed or self.generation < 0:
                continue
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id}
            resp = await self._ask(ApiKeys.HEARTBEAT, body, HEARTBEAT_VERSION)
            error = Errors(resp["error_code"])
            if error == Errors.NONE:
                continue
            if error == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            if error in REJOIN_ERRORS:
                log.info("group %s: heartbeat answered %s; rejoining", self.group_id, error.name)
                self.rejoin_needed = True
            else:
                self._coordinator_lost(error)

    # ------------------------------------------------------------------ offsets

    async def committed(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """The committed offsets of ``partitions`` (-1: none)."""
        body = {"group_id": self.group_id, "topics": [{"name": topic, "partition_indexes": partitions}]}
        while True:
            resp = await self._ask(ApiKeys.OFFSET_FETCH, body, FETCH_OFFSETS_VERSION)
            error = Errors(resp["error_code"])
            if error == Errors.NONE:
                return {
                    p["partition_index"]: int(p["committed_offset"])
                    for t in resp["topics"]
                    for p in t["partitions"]
                    if t["name"] == topic
                }
            if not self._coordinator_lost(error):
                raise ClientError(
                    f"fetching the offsets of group {self.group_id!r} failed: {error_name(error)}"
                )
            await trio.sleep(0.2)

    async def commit(self, topic: str, offsets: dict[int, int]) -> bool:
        """Commits ``offsets`` (the next offset to read, per partition); False if the group is rebalancing
        (the member must rejoin) or the coordinator moved."""
        if not offsets or self.generation < 0:
            return True
        body = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": self.generation,
            "member_id": self.member_id,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o} for p, o in sorted(offsets.items())
                    ],
                }
            ],
        }
        resp = await self._ask(ApiKeys.OFFSET_COMMIT, body, COMMIT_VERSION)
        errors = {Errors(p["error_code"]) for t in resp["topics"] for p in t["partitions"]}
        if errors <= {Errors.NONE}:
            return True
        for error in errors:
            if error in REJOIN_ERRORS:
                self.rejoin_needed = True
            self._coordinator_lost(error)
        log.info("group %s: commit answered %s", self.group_id, sorted(e.name for e in errors))
        return False

    async def leave(self) -> None:
        if not self.member_id or self.coordinator is None:
            return
        body = {"group_id": self.group_id, "members": [{"member_id": self.member_id}]}
        with trio.move_on_after(5):
            try:
                conn = await self.client.broker_connection(self.coordinator)
                await conn.request(ApiKeys.LEAVE_GROUP, body, api_version=LEAVE_VERSION, timeout=5)
            except NO_ANSWER:
                pass
        self.generation = -1
