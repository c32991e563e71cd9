"""Three controller processes as a Raft quorum (``controller.quorum.voters``) and a real broker.

One voter becomes the active controller; the others answer controller APIs with NOT_CONTROLLER and
DESCRIBE_QUORUM with the leader they know. The broker registers through whichever voter it reaches first.
A topic is created; the active controller is killed (-9); another voter takes over, rebuilds the cluster
state from the committed metadata log (the topic is still there), and the broker keeps heartbeating to
it. The surviving voters' committed metadata logs agree record by record."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.ports import free_ports
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.integration.harness import (
    REPO_ROOT,
    BrokerProcess,
    async_wait_until,
    events,
    python_cmd,
    request,
    wait_until,
)

pytestmark = pytest.mark.integration

IDS = (1000, 1001, 1002)


class Voter:
    def __init__(self, node_id: int, port: int, root: Path, voters: str) -> None:
        self.node_id = node_id
        self.port = port
        self.directory = root / f"controller-{node_id}"
        self.voters = voters
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def journal(self) -> Path:
        return self.directory / "events.jsonl"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        overrides = {
            "node.id": str(self.node_id),
            "listeners": f"127.0.0.1:{self.port}",
            "metadata.log.dir": str(self.directory),
            "controller.quorum.voters": self.voters,
            "broker.session.timeout.ms": "4000",
            "cluster.id": "it",
        }
        args = ["controller", "start"]
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        with (self.directory.parent / f"controller-{self.node_id}.stderr").open("ab") as err:
            self.proc = subprocess.Popen(
                python_cmd(*args), cwd=REPO_ROOT, stdout=err, stderr=err, start_new_session=True
            )

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        return events(self.journal, event)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=15)


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[list[Voter]]:
    ports = free_ports(len(IDS))
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in zip(IDS, ports, strict=True))
    nodes = [Voter(i, p, tmp_path, voters) for i, p in zip(IDS, ports, strict=True)]
    try:
        for node in nodes:
            node.start()
        yield nodes
    finally:
        for node in nodes:
            node.kill()


def active(nodes: list[Voter], after_epoch: int = 0) -> tuple[Voter, int] | None:
    """The voter whose latest activation is the newest, with an epoch above ``after_epoch``."""
    best: tuple[Voter, int] | None = None
    for node in nodes:
        if not node.alive():
            continue
        activated = node.events("controller_activated")
        deactivated = node.events("controller_deactivated")
        if not activated:
            continue
        epoch = int(activated[-1]["controller_epoch"])
        if deactivated and int(deactivated[-1]["controller_epoch"]) >= epoch:
            continue
        if epoch > after_epoch and (best is None or epoch > best[1]):
            best = (node, epoch)
    return best


async def _stale_refused(host: str, port: int, body: dict[str, Any]) -> dict[str, Any] | None:
    answer = await request(host, port, ApiKeys.LEADER_AND_ISR, body)
    return answer if answer["error_code"] == Errors.STALE_CONTROLLER_EPOCH else None


async def test_quorum_elects_fails_over_and_keeps_the_metadata(quorum: list[Voter], tmp_path: Path) -> None:
    leader, epoch = wait_until(lambda: active(quorum), 30, message="an active controller")
    others = [n for n in quorum if n is not leader]

    # DESCRIBE_QUORUM: the leader lists the voters; a follower says NOT_LEADER_OR_FOLLOWER, naming it.
    body = await request("127.0.0.1", leader.port, ApiKeys.DESCRIBE_QUORUM, {})
    part = body["topics"][0]["partitions"][0]
    assert (part["error_code"], part["leader_id"], part["leader_epoch"]) == (0, leader.node_id, epoch)
    assert sorted(v["replica_id"] for v in part["current_voters"]) == list(IDS)
    body = await request("127.0.0.1", others[0].port, ApiKeys.DESCRIBE_QUORUM, {})
    part = body["topics"][0]["partitions"][0]
    assert part["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER
    # Controller APIs at a non-active voter: NOT_CONTROLLER.
    body = await request("127.0.0.1", others[0].port, ApiKeys.DESCRIBE_CLUSTER, {})
    assert body["error_code"] == Errors.NOT_CONTROLLER
    # Any voter lists the quorum APIs in API_VERSIONS.
    body = await request("127.0.0.1", others[0].port, ApiKeys.API_VERSIONS, {})
    assert {int(ApiKeys.VOTE), int(ApiKeys.DESCRIBE_QUORUM)} <= {k["api_key"] for k in body["api_keys"]}

    # A broker that knows all three voters, the first of them maybe not the active one.
    broker = BrokerProcess(
        1,
        tmp_path / "broker-1",
        {
            "controller.quorum.voters": leader.voters,
            "broker.heartbeat.interval.ms": "200",
            "cluster.id": "it",
        },
    )
    try:
        broker.start()
        wait_until(lambda: leader.events("broker_unfenced"), 30, message="the broker unfenced by the leader")
        created = await request(
            "127.0.0.1",
            leader.port,
            ApiKeys.CREATE_TOPICS,
            {
                "topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1, "configs": {}}],
                "timeout_ms": 5000,
            },
        )
        assert created["topics"][0]["error_code"] == 0
        wait_until(lambda: broker.events("became_leader"), 20, message="the broker leading t")

        # Kill the active controller: another voter takes over within a few election timeouts.
        killed_at = time.monotonic()
        leader.kill()
        new_leader, new_epoch = wait_until(
            lambda: active(others, epoch), 30, message="a new active controller after the kill"
        )
        takeover_s = time.monotonic() - killed_at
        assert new_epoch > epoch
        assert takeover_s < 10, takeover_s
        # Its state came from the metadata log: the topic and the broker are known.
        metadata = await request("127.0.0.1", new_leader.port, ApiKeys.METADATA, {"topics": None})
        assert [t["name"] for t in metadata["topics"]] == ["t"]
        assert [b["node_id"] for b in metadata["brokers"]] == [1]
        # The broker found it and heartbeats to it; it is not fenced.
        wait_until(
            lambda: [
                e for e in broker.events() if e.get("event") == "became_leader" and e.get("topic") == "t"
            ],
            5,
        )
        # A deposed controller's epoch is refused once the broker has heard from the new one. (The probe
        # names the partition's current leader epoch, so even before that it changes nothing.)
        stale_body = {
            "controller_id": leader.node_id,
            "controller_epoch": epoch,
            "broker_epoch": -1,
            "topic_states": [
                {
                    "topic_name": "t",
                    "partition_states": [
                        {
                            "partition_index": 0,
                            "controller_epoch": epoch,
                            "leader": 1,
                            "leader_epoch": 0,
                            "isr": [1],
                            "partition_epoch": 0,
                            "replicas": [1],
                            "is_new": False,
                        }
                    ],
                }
            ],
            "live_leaders": [],
        }
        refused = await async_wait_until(
            lambda: _stale_refused(broker.host, broker.port, stale_body), 15, message="STALE_CONTROLLER_EPOCH"
        )
        assert refused["error_code"] == Errors.STALE_CONTROLLER_EPOCH
        described_cluster = await request("127.0.0.1", new_leader.port, ApiKeys.DESCRIBE_CLUSTER, {})

        def unfenced() -> bool:
            d = described_cluster
            return bool(d["brokers"]) and not d["brokers"][0]["fenced"]

        assert unfenced() or wait_until(
            lambda: any(e for e in new_leader.events("broker_unfenced")), 20, message="broker live again"
        )
    finally:
        broker.kill()
        broker.close()

    # The two survivors' committed metadata logs agree, record for record.
    survivors = [n for n in quorum if n.alive()]

    def committed(node: Voter) -> dict[int, int]:
        return {int(e["offset"]): int(e["crc"]) for e in node.events("metadata_committed")}

    a, b = (committed(n) for n in survivors)
    common = set(a) & set(b)
    assert common and all(a[o] == b[o] for o in common)


async def test_paused_leader_wakes_as_a_follower_and_a_clean_stop_hands_over_at_once(
    quorum: list[Voter],
) -> None:
    leader, epoch = wait_until(lambda: active(quorum), 30, message="an active controller")
    others = [n for n in quorum if n is not leader]

    # SIGSTOP the active controller: the others elect a new one; on SIGCONT the old one learns the new
    # epoch and follows, without acting as a controller again.
    assert leader.proc is not None
    leader.proc.send_signal(signal.SIGSTOP)
    new_leader, new_epoch = wait_until(lambda: active(others, epoch), 30, message="a new active controller")
    leader.proc.send_signal(signal.SIGCONT)

    def follows() -> bool:
        states = leader.events("quorum_state")
        return (
            bool(states)
            and states[-1]["role"] == "follower"
            and states[-1]["leader_id"] >= 0
            and states[-1]["epoch"] >= new_epoch
        )

    wait_until(follows, 20, message="the woken controller following the new leader")
    wait_until(
        lambda: leader.events("controller_deactivated"), 10, message="the woken controller deactivated"
    )
    body = await request("127.0.0.1", leader.port, ApiKeys.CREATE_TOPICS, {"topics": [], "timeout_ms": 1000})
    assert body["error_code"] == Errors.NOT_CONTROLLER

    # SIGTERM the active controller: it resigns with END_QUORUM_EPOCH and a successor stands at once,
    # well within the fetch timeout (2 s) the others would otherwise wait.
    assert new_leader.proc is not None
    stopped_at = time.monotonic()
    new_leader.proc.send_signal(signal.SIGTERM)
    assert new_leader.proc.wait(timeout=15) == 0
    remaining = [n for n in quorum if n is not new_leader]
    _, third_epoch = wait_until(
        lambda: active(remaining, new_epoch), 20, message="a successor after the stop"
    )
    assert third_epoch > new_epoch
    assert time.monotonic() - stopped_at < 2.0
    ends = [e for e in new_leader.events("quorum_state") if e["role"] == "resigned"]
    assert ends and ends[-1]["epoch"] == new_epoch


async def _create_topic_anywhere(nodes: list[Voter], name: str) -> bool:
    """CREATE_TOPICS at each live voter until the active one accepts it."""
    for node in nodes:
        if not node.alive():
            continue
        try:
            body = await request(
                "127.0.0.1",
                node.port,
                ApiKeys.CREATE_TOPICS,
                {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "configs": {}}],
                 "timeout_ms": 2000},
            )  # fmt: skip
        except Exception:  # a voter that is down or paused: try the next
            continue
        if body.get("error_code") == Errors.NOT_CONTROLLER:
            continue
        topic = body["topics"][0]
        return bool(topic["error_code"] in (0, Errors.TOPIC_ALREADY_EXISTS))
    return False


async def test_kills_pauses_and_stops_of_active_controllers_keep_the_quorum_safe(
    quorum: list[Voter], tmp_path: Path
) -> None:
    """Round after round the active controller is killed, paused or stopped cleanly (then brought back)
    and a topic is created through whichever voter leads. Every topic survives; no epoch had two leaders;
    the voters' committed metadata logs agree."""
    broker = BrokerProcess(
        1,
        tmp_path / "broker-1",
        {
            "controller.quorum.voters": quorum[0].voters,
            "broker.heartbeat.interval.ms": "200",
            "cluster.id": "it",
        },
    )
    try:
        broker.start()
        await _rounds(quorum)
    finally:
        broker.kill()
        broker.close()


async def _rounds(quorum: list[Voter]) -> None:
    epoch = 0
    created: list[str] = []
    for round_no, action in enumerate(["kill", "pause", "term", "kill", "pause"]):
        leader, epoch = wait_until(
            lambda e=epoch: active(quorum, e), 30, message=f"a leader in round {round_no}"
        )
        name = f"t{round_no}"
        assert await async_wait_until(
            lambda n=name: _create_topic_anywhere(quorum, n), 20, message=f"topic {name}"
        )
        created.append(name)
        assert leader.proc is not None
        if action == "kill":
            leader.kill()
            wait_until(lambda e=epoch: active(quorum, e), 30, message="a successor")
            leader.start()
        elif action == "term":
            leader.proc.send_signal(signal.SIGTERM)
            leader.proc.wait(timeout=15)
            wait_until(lambda e=epoch: active(quorum, e), 30, message="a successor")
            leader.start()
        else:
            leader.proc.send_signal(signal.SIGSTOP)
            rest = [n for n in quorum if n is not leader]
            wait_until(lambda e=epoch, r=rest: active(r, e), 30, message="a successor")
            leader.proc.send_signal(signal.SIGCONT)
    final, _ = wait_until(lambda: active(quorum, epoch), 30, message="a final leader") or (None, 0)
    names: list[str] = []

    async def all_topics() -> bool:
        names[:] = []
        try:
            body = await request("127.0.0.1", final.port, ApiKeys.METADATA, {"topics": None})
        except Exception:
            return False
        names.extend(t["name"] for t in body.get("topics", []))
        return set(created) <= set(names)

    await async_wait_until(all_topics, 20, message=lambda: f"every topic at the final leader (has {names})")

    leaders: dict[int, set[int]] = {}
    crcs: dict[int, set[int]] = {}
    for node in quorum:
        for e in node.events("quorum_state"):
            if e["role"] == "leader":
                leaders.setdefault(int(e["epoch"]), set()).add(node.node_id)
        for e in node.events("metadata_committed"):
            crcs.setdefault(int(e["offset"]), set()).add(int(e["crc"]))
    assert all(len(who) == 1 for who in leaders.values()), leaders
    assert all(len(c) == 1 for c in crcs.values()), {o: c for o, c in crcs.items() if len(c) > 1}
