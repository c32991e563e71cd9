"""The controller quorum from a user's side (SPEC §11, docs/controller.md): `isrsim cluster up
--controllers 3`, cluster.json's `controllers`, `cluster status` with each voter's role, epoch, log end
offset and high watermark, `controller kill --active` (a new leader takes over and topic commands keep
working through any voter), `controller pause|resume`, `controller restart ID`, and `cluster down` then
`cluster up` on the same root; `net partition|isolate` with controller ids."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.processes import process_state
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import run_cli, wait_until

pytestmark = pytest.mark.integration

IDS = [1000, 1001, 1002]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", brokers=2, settings=FAST, controllers=3)


def status(cluster: Cluster) -> dict[str, Any]:
    return dict(json.loads(cluster.cli("cluster", "status", "-o", "json").stdout))


def roles(doc: dict[str, Any]) -> dict[int, str]:
    return {c["id"]: c["role"] for c in doc["controllers"]}


def settled(
    cluster: Cluster, leader_not: int | None = None, down: frozenset[int] = frozenset()
) -> dict[str, Any] | None:
    """The status once one voter leads (not ``leader_not``), is active, and every other live voter follows it
    in its epoch."""
    doc = status(cluster)
    q = doc["quorum"]
    if q is None or q["leader_id"] is None or q["leader_id"] == leader_not:
        return None
    rows = {c["id"]: c for c in doc["controllers"]}
    if not rows[q["leader_id"]]["active"]:
        return None
    for cid, row in rows.items():
        if cid == q["leader_id"]:
            continue
        want = "unreachable" if cid in down else "follower"
        if row["role"] != want or (want == "follower" and row["epoch"] != q["epoch"]):
            return None
    return doc


def test_a_three_voter_quorum_from_the_command_line(cluster: Cluster) -> None:
    info = cluster.info
    # cluster.json: three controllers, ids from 1000, `controller` the first; every broker knows them all.
    raw = json.loads((cluster.root / "cluster.json").read_text())
    assert [c["id"] for c in raw["controllers"]] == IDS
    assert raw["controller"] == raw["controllers"][0]
    for c in raw["controllers"]:
        assert {"id", "host", "port", "pid", "dir"} <= set(c)
        assert process_state(c["pid"]) == "running" and Path(c["dir"]).name == f"controller-{c['id']}"
    voters = info.quorum_voters
    for b in info.brokers:
        assert f"controller.quorum.voters={voters}" in Path(b.config).read_text()

    # Status: one leader, active; the others follow it in the same epoch; log end offsets and HWs known.
    doc = wait_until(lambda: settled(cluster), 30, 0.3, message=lambda: str(status(cluster)["controllers"]))
    leader, epoch = doc["quorum"]["leader_id"], doc["quorum"]["epoch"]
    assert sorted(roles(doc).values()) == ["follower", "follower", "leader"]
    for row in doc["controllers"]:
        assert row["epoch"] == epoch and row["log_end_offset"] > 0 and row["high_watermark"] > 0
    text = cluster.cli("cluster", "status").stdout
    assert f"controller quorum: leader {leader}, epoch {epoch}" in text
    # The healthcheck of a voter says it is ready once it knows the leader.
    for c in info.controllers:
        assert f"quorum leader {leader}, epoch {epoch}" in run_cli("health", c.address).stdout

    cluster.cli("topic", "create", "a", "--partitions", "2", "--replication-factor", "2")
    # --bootstrap-server: every voter's address reaches the active one; so does one follower alone (it names
    # the leader and the voters' addresses, and the command follows).
    every = ",".join(c.address for c in info.controllers)
    assert run_cli("topic", "list", "--bootstrap-server", every).stdout.split() == ["a"]
    follower = next(c for c in info.controllers if c.id != leader)
    assert run_cli("topic", "list", "--bootstrap-server", follower.address).stdout.split() == ["a"]

    # Kill the active controller: another voter takes over, the status says so, topics still work (the
    # CLI reaches the new active controller whichever voter it asks first).
    killed = cluster.cli("controller", "kill", "--active").stdout
    assert f"sent SIGKILL to controller {leader}" in killed
    doc = wait_until(
        lambda: settled(cluster, leader_not=leader, down=frozenset({leader})),
        30,
        0.3,
        message=lambda: str(status(cluster)["controllers"]),
    )
    assert doc["quorum"]["epoch"] > epoch
    assert roles(doc)[leader] == "unreachable"
    cluster.cli("topic", "create", "b", "--partitions", "2", "--replication-factor", "2")
    assert "b" in cluster.cli("topic", "list").stdout.split()

    # Restart the killed voter: it rejoins as a follower of the new leader.
    out = cluster.cli("controller", "restart", str(leader)).stdout
    assert f"controller {leader} restarted" in out
    wait_until(lambda: settled(cluster), 30, 0.3, message=lambda: str(status(cluster)["controllers"]))

    # Pause the active controller: the others elect a leader among themselves; it resumes as a follower.
    doc = settled(cluster) or status(cluster)
    paused = doc["quorum"]["leader_id"]
    assert f"controller {paused} paused" in cluster.cli("controller", "pause", "--active").stdout
    doc = wait_until(
        lambda: settled(cluster, leader_not=paused, down=frozenset({paused})),
        30,
        0.3,
        message=lambda: str(status(cluster)["controllers"]),
    )
    assert {c["id"]: c["state"] for c in doc["controllers"]}[paused] == "paused"
    cluster.cli("topic", "create", "c", "--partitions", "1", "--replication-factor", "2")
    cluster.cli("controller", "resume", str(paused))
    doc = wait_until(lambda: settled(cluster), 30, 0.3, message=lambda: str(status(cluster)["controllers"]))
    assert roles(doc)[paused] == "follower"
    assert doc["quorum"]["leader_id"] != paused

    # Network faults take controller ids. A one-way fault between two voters stays one-way; isolating
    # the leader makes the others elect another.
    lead = doc["quorum"]["leader_id"]
    other = next(i for i in IDS if i != lead)
    cluster.cli("net", "partition", str(lead), str(other), "--one-way")
    faults = status(cluster)["faults"]
    assert [(f["src"], f["dst"], f["partitioned"]) for f in faults] == [(str(lead), str(other), True)]
    cluster.cli("net", "heal")
    cluster.cli("net", "isolate", str(lead))
    wait_until(
        lambda: settled(cluster, leader_not=lead, down=frozenset({lead})),
        30,
        0.3,
        message=lambda: str(status(cluster)["controllers"]),
    )
    # Healed, it rejoins (no pre-vote, KIP-996: an isolated voter that stood again and again may come back
    # with a higher epoch and force one more election, as in Kafka before 3.9; it may even win it).
    cluster.cli("net", "heal")
    doc = wait_until(lambda: settled(cluster), 30, 0.3, message=lambda: str(status(cluster)["controllers"]))
    assert sorted(roles(doc).values()) == ["follower", "follower", "leader"]

    # Down and up again on the same root: the three voters elect a leader that knows the three topics.
    down = cluster.cli("cluster", "down").stdout
    for cid in IDS:
        assert f"controller {cid}: stopped cleanly" in down
    assert all(process_state(c.pid) == "stopped" for c in cluster.info.controllers)
    up = cluster.cli("cluster", "up").stdout
    assert "3 controllers (active: 10" in up
    assert cluster.cli("topic", "list").stdout.split() == ["a", "b", "c"]
