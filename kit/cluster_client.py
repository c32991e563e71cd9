"""A client's view of a cluster: bootstrap servers, a METADATA-fed map of partition leaders, and one
pooled connection per broker (each held open by a task of the client's nursery)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from kit.reachability import nothing_listening, refused
from protocol import (
    CLUSTER_FILE,
    ApiKeys,
    AuthenticationFailed,
    ConnectionClosed,
    Errors,
    KafkaConnection,
    TopicPartition,
    open_connection,
)

log = logging.getLogger(__name__)

Address = tuple[str, int]


class ClientError(Exception):
    """Something the user must fix (no cluster there, unknown topic); the message says what to do."""


class NothingListening(ClientError):
    """Every address asked refused the connection: no broker runs there (waiting cannot help)."""


# A topic a broker does not know is looked up again for this long: a topic just made reaches the brokers'
# metadata a moment after the controller has it.
UNKNOWN_TOPIC_GRACE_S = 1.0


CREDENTIALS_HINT = "(check the cluster root's client.properties, --command-config FILE, or --user/--password)"


def parse_address(value: str) -> Address:
    value = value.strip()
    if "://" in value:
        value = value.split("://", 1)[1]
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ClientError(f"{value!r} is not host:port")
    return host or "127.0.0.1", int(port)


def bootstrap_from(bootstrap_server: str | None, data_dir: Path | None) -> list[Address]:
    """``--bootstrap-server`` wins; else the brokers in ``<data-dir>/cluster.json``."""
    if bootstrap_server:
        return [parse_address(s) for s in bootstrap_server.split(",") if s.strip()]
    root = data_dir or Path("isrsim-data")
    path = root / CLUSTER_FILE
    try:
        cluster = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClientError(
            f"no cluster at {root} ({path} does not exist): start one with `isrsim cluster up "
            f"--data-dir {root}` or pass --bootstrap-server host:port"
        ) from None
    except (OSError, ValueError) as exc:
        raise ClientError(f"cannot read {path}: {exc}") from None
    brokers = cluster.get("brokers", [])
    if not brokers:
        raise ClientError(f"{path} lists no brokers")
    return [(str(b["host"]), int(b["port"])) for b in brokers]


@dataclass(slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)


class ClusterClient:
    def __init__(self, nursery: trio.Nursery, bootstrap: list[Address], *, client_id: str = "isrsim") -> None:
        self._nursery = nursery
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.brokers: dict[int, Address] = {}
        self.partitions: dict[TopicPartition, PartitionInfo] = {}
        self.controller_id = -1
        self._conns: dict[Address, tuple[KafkaConnection, trio.CancelScope]] = {}
        self._opening: dict[Address, trio.Event] = {}

    # ------------------------------------------------------------------ connections

    async def connection(self, address: Address) -> KafkaConnection:
        while True:
            held = self._conns.get(address)
            if held is not None and not held[0].closed:
                return held[0]
            waiting = self._opening.get(address)
            if waiting is None:
                break
            await waiting.wait()
        event = self._opening[address] = trio.Event()
        try:
            conn: KafkaConnection = await self._nursery.start(self._hold, address)
        finally:
            del self._opening[address]
            event.set()
        return conn

    async def _hold(self, address: Address, *, task_status: trio.TaskStatus[KafkaConnection]) -> None:
        with trio.CancelScope() as scope:
            try:
                async with open_connection(address[0], address[1], client_id=self.client_id) as conn:
                    conn.responses_in_order = True  # a broker answers in order: a skipped answer was lost
                    self._conns[address] = (conn, scope)
                    task_status.started(conn)
                    while not conn.closed:
                        await trio.sleep(0.5)
            except AuthenticationFailed as exc:
                # Retrying cannot help: the credentials are wrong (docs/security.md).
                raise ClientError(f"{address[0]}:{address[1]}: {exc} {CREDENTIALS_HINT}") from None
        self._conns.pop(address, None)

    def drop(self, address: Address) -> None:
        held = self._conns.pop(address, None)
        if held is not None:
            held[1].cancel()

    async def broker_connection(self, broker_id: int) -> KafkaConnection:
        address = self.brokers.get(broker_id)
        if address is None:
            raise ConnectionClosed(f"broker {broker_id} is not in the metadata")
        return await self.connection(address)

    async def request_any(self, api_key: int, body: Any, *, timeout: float = 10.0) -> dict[str, Any]:
        """Sends to the first bootstrap or known broker that answers."""
        errors: list[str] = []
        not_listening: list[Address] = []
        candidates = list(dict.fromkeys([*self.brokers.values(), *self.bootstrap]))
        for address in candidates:
            try:
                conn = await self.connection(address)
                return await conn.request(api_key, body, timeout=timeout)
            except (OSError, ConnectionClosed, trio.TooSlowError) as exc:
                self.drop(address)
                if refused(exc):
                    not_listening.append(address)
                errors.append(f"{address[0]}:{address[1]}: {exc or type(exc).__name__}")
        if candidates and len(not_listening) == len(candidates):
            raise NothingListening(nothing_listening(candidates, "broker"))
        raise ClientError(
            "no broker answered (" + "; ".join(errors) + "): is the cluster up? "
            "(`isrsim cluster status` shows it, `isrsim cluster up` starts it)"
        )

    # ------------------------------------------------------------------ metadata

    async def refresh_metadata(
        self, topics: list[str] | None = None, *, timeout: float = 10.0
    ) -> dict[str, Any]:
        body = {"topics": None if topics is None else [{"name": t} for t in topics]}
        resp = await self.request_any(ApiKeys.METADATA, body, timeout=timeout)
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
        self.controller_id = resp.get("controller_id", -1)
        for t in resp["topics"]:
            if t["error_code"] != Errors.NONE:
                continue
            for p in t["partitions"]:
                self.partitions[(t["name"], p["partition_index"])] = PartitionInfo(
                    p["leader_id"], p["leader_epoch"], list(p["replica_nodes"]), list(p["isr_nodes"])
                )
        return resp

    async def topic_partitions(self, topic: str, *, wait_s: float = 10.0) -> list[int]:
        """The topic's partitions, waiting up to ``wait_s`` for its partitions' leaders. Fails at once
        when nothing listens at any address, and after :data:`UNKNOWN_TOPIC_GRACE_S` when the brokers
        do not know the topic (isrsim's clients do not ask for auto-creation)."""
        problem: ClientError | None = None
        unknown_since: float | None = None
        with trio.move_on_after(wait_s):
            while True:
                try:
                    # Short tries, so that one lost answer does not use up the whole wait.
                    resp = await self.refresh_metadata([topic], timeout=min(2.0, wait_s))
                except NothingListening:
                    raise
                except ClientError as exc:
                    problem = exc
                    await trio.sleep(0.2)
                    continue
                problem = None
                unknown = any(
                    t["name"] == topic and t["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
                    for t in resp["topics"]
                )
                if not unknown:
                    unknown_since = None
                elif unknown_since is None:
                    unknown_since = trio.current_time()
                elif trio.current_time() - unknown_since >= UNKNOWN_TOPIC_GRACE_S:
                    break
                for t in resp["topics"]:
                    if t["name"] == topic and t["error_code"] == Errors.NONE and t["partitions"]:
                        return sorted(p["partition_index"] for p in t["partitions"])
                    if t["name"] == topic and t["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED:
                        grant = (
                            f"isrsim acl add --allow-principal User:NAME --operation Write --topic {topic}"
                        )
                        raise ClientError(
                            f"not authorized to describe topic {topic!r} (TOPIC_AUTHORIZATION_FAILED): a "
                            f"super user can grant it, e.g. `{grant}` (Write and Read imply Describe)"
                        )
                await trio.sleep(0.2)
        if problem is not None:
            raise problem
        raise ClientError(
            f"topic {topic!r} does not exist: create it with `isrsim topic create {topic} --partitions P "
            f"--replication-factor R`"
        )

    def leader_for(self, tp: TopicPartition) -> int:
        info = self.partitions.get(tp)
        return -1 if info is None else info.leader

    async def aclose(self) -> None:
        for address in list(self._conns):
            self.drop(address)
