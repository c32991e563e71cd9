"""Users and ACLs are metadata records of the controller quorum (SPEC §11): on a secure three-voter cluster
(`isrsim cluster up --secure --controllers 3`, real processes), a user and an ACL added through the CLI are
still there after the active controller is killed: the new active controller lists them, a SASL login with
the user still works against a broker, and the voters' journals say the change was committed before it was
acted on. The record carries the salted credential, never the password."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kit.cluster_files import ProcessEntry
from protocol.client import AuthenticationFailed
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import wait_until
from tests.integration.test_quorum_cli import settled, status
from tests.integration.test_security import authenticates

pytestmark = pytest.mark.integration

USER, PASSWORD = "bob", "bob-secret-pw-1"
TOPIC = "bobs"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", brokers=2, secure=True, controllers=3)


def logs_in(cluster: Cluster, broker: ProcessEntry, password: str) -> bool:
    """A SASL/SCRAM login as the user against the broker succeeds."""
    try:
        return trio.run(authenticates, broker, cluster.root, USER, password)
    except AuthenticationFailed:
        return False


def users(cluster: Cluster) -> list[str]:
    listed: list[dict[str, Any]] = json.loads(cluster.cli("user", "list", "--output", "json").stdout)
    return [u["user"] for u in listed]


def journal(cluster: Cluster, controller_id: int) -> list[dict[str, Any]]:
    path = cluster.root / f"controller-{controller_id}" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_users_and_acls_survive_the_loss_of_the_active_controller(cluster: Cluster) -> None:
    doc = wait_until(lambda: settled(cluster), 30, 0.3, message=lambda: str(status(cluster)["controllers"]))
    leader = doc["quorum"]["leader_id"]

    cluster.cli("user", "add", USER, "--password", PASSWORD)
    cluster.cli("acl", "add", "--allow-principal", f"User:{USER}", "--operation", "Read", "--topic", TOPIC)
    assert USER in users(cluster)
    broker = cluster.info.brokers[0]
    wait_until(
        lambda: logs_in(cluster, broker, PASSWORD),
        timeout=20,
        message=f"user {USER} known to broker {broker.id}",
    )

    # Every voter acted on the committed change: its journal has the committed copy, and the metadata log
    # holds the salted credential but not the password.
    for c in cluster.info.controllers:
        wait_until(
            lambda c=c: any(
                e["event"] == "security_metadata_changed" and e["users"] >= 2 and e["acls"] >= 1
                for e in journal(cluster, c.id)
            ),
            timeout=20,
            message=f"controller {c.id} took the committed users and ACLs",
        )
        segments = list((cluster.root / f"controller-{c.id}" / "__cluster_metadata-0").glob("*.log"))
        data = b"".join(p.read_bytes() for p in segments)
        assert USER.encode() in data and PASSWORD.encode() not in data

    killed = cluster.cli("controller", "kill", "--active").stdout
    assert f"sent SIGKILL to controller {leader}" in killed
    doc = wait_until(
        lambda: settled(cluster, leader_not=leader, down=frozenset({leader})),
        30,
        0.3,
        message=lambda: str(status(cluster)["controllers"]),
    )
    new_leader = doc["quorum"]["leader_id"]
    assert new_leader != leader

    # The new active controller serves the same user and ACL.
    assert USER in users(cluster)
    acls = cluster.cli("acl", "list", "--principal", f"User:{USER}").stdout
    assert f"User:{USER}" in acls and TOPIC in acls and "READ" in acls.upper()
    # A SASL login with the user still works against a broker.
    assert logs_in(cluster, broker, PASSWORD)
    assert not logs_in(cluster, broker, "wrong-password")

    # And the new leader's changes are committed and served too: the user is deleted, and stays deleted.
    cluster.cli("user", "delete", USER)
    assert USER not in users(cluster)
    wait_until(
        lambda: not logs_in(cluster, broker, PASSWORD),
        timeout=20,
        message=f"user {USER} deleted on broker {broker.id}",
    )
