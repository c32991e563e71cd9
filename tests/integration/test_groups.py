"""Consumer groups over msgpack (docs/groups.md): a group's life on one broker, its offsets surviving a
restart, and the coordinator moving with the ``__consumer_offsets`` leadership in a managed cluster."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from coordinator.group.offsets_log import GroupLoader
from protocol.api_keys import ApiKeys
from protocol.client import open_connection
from protocol.errors import Errors
from protocol.group_records import partition_for_group
from protocol.records import build_simple_batch, iter_batches
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import (
    REPO_ROOT,
    BrokerLauncher,
    BrokerProcess,
    python_cmd,
    run_cli,
    wait_until,
)

GROUP = "orders-app"
OFFSETS = "__consumer_offsets"


async def ask(host: str, port: int, api: ApiKeys, body: dict[str, Any], version: int) -> dict[str, Any]:
    async with open_connection(host, port, client_id="group-test") as conn:
        return await conn.request(api, body, api_version=version, timeout=15)


def call(broker: BrokerProcess, api: ApiKeys, body: dict[str, Any], version: int) -> dict[str, Any]:
    return trio.run(ask, broker.host, broker.port, api, body, version)


def join_body(member_id: str = "") -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"}],
    }


def commit_body(member_id: str, generation: int, offset: int) -> dict[str, Any]:
    return {
        "group_id": GROUP,
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset}]}],
    }


def produce_to_t(broker: BrokerProcess, count: int, start: int = 0) -> None:
    values = [f"v{i}".encode() for i in range(start, start + count)]
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_simple_batch(values)}]}
        ],
    }
    resp = call(broker, ApiKeys.PRODUCE, body, 0)
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0


def fetch_committed(broker: BrokerProcess) -> int | None:
    resp = call(
        broker,
        ApiKeys.OFFSET_FETCH,
        {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]},
        5,
    )
    if resp["error_code"] == Errors.COORDINATOR_LOAD_IN_PROGRESS:
        return None
    assert resp["error_code"] == 0, resp
    return int(resp["topics"][0]["partitions"][0]["committed_offset"])


@pytest.fixture
def broker(broker_launcher: BrokerLauncher) -> Iterator[BrokerProcess]:
    yield broker_launcher.start(
        overrides={
            "initial.leader.partitions": f"{OFFSETS}-0,t-0",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
    )


def test_a_group_joins_syncs_commits_and_its_offsets_survive_a_crash(broker: BrokerProcess) -> None:
    found = call(broker, ApiKeys.FIND_COORDINATOR, {"key": GROUP}, 3)
    assert (found["error_code"], found["node_id"], found["port"]) == (0, 1, broker.port)
    batch = call(broker, ApiKeys.FIND_COORDINATOR, {"coordinator_keys": [GROUP, "other"]}, 4)
    assert [c["error_code"] for c in batch["coordinators"]] == [0, 0]

    # KIP-394: the first join gets an id to come back with.
    first = call(broker, ApiKeys.JOIN_GROUP, join_body(), 5)
    assert first["error_code"] == Errors.MEMBER_ID_REQUIRED and first["member_id"].startswith("group-test-")
    member = first["member_id"]
    joined = call(broker, ApiKeys.JOIN_GROUP, join_body(member), 5)
    assert joined["error_code"] == 0 and joined["leader"] == member and joined["generation_id"] == 1
    assert [m["member_id"] for m in joined["members"]] == [member]
    synced = call(
        broker,
        ApiKeys.SYNC_GROUP,
        {
            "group_id": GROUP,
            "generation_id": 1,
            "member_id": member,
            "assignments": [{"member_id": member, "assignment": b"mine"}],
        },
        3,
    )
    assert (synced["error_code"], synced["assignment"]) == (0, b"mine")
    beat = call(broker, ApiKeys.HEARTBEAT, {"group_id": GROUP, "generation_id": 1, "member_id": member}, 3)
    assert beat["error_code"] == 0
    stale = call(broker, ApiKeys.HEARTBEAT, {"group_id": GROUP, "generation_id": 0, "member_id": member}, 3)
    assert stale["error_code"] == Errors.ILLEGAL_GENERATION

    committed = call(broker, ApiKeys.OFFSET_COMMIT, commit_body(member, 1, 42), 7)
    assert committed["topics"][0]["partitions"][0]["error_code"] == 0
    unknown = call(
        broker,
        ApiKeys.OFFSET_COMMIT,
        {
            **commit_body(member, 1, 1),
            "topics": [{"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
        },
        7,
    )
    assert unknown["topics"][0]["partitions"][0]["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_committed(broker) == 42
    v8 = call(broker, ApiKeys.OFFSET_FETCH, {"groups": [{"group_id": GROUP, "topics": None}]}, 8)
    assert v8["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 42

    described = call(broker, ApiKeys.DESCRIBE_GROUPS, {"groups": [GROUP]}, 5)["groups"][0]
    assert (described["group_state"], described["protocol_data"]) == ("Stable", "range")
    assert described["members"][0]["member_assignment"] == b"mine"
    assert described["members"][0]["client_host"] == "/127.0.0.1"
    listed = call(broker, ApiKeys.LIST_GROUPS, {}, 4)
    assert {(g["group_id"], g["group_state"]) for g in listed["groups"]} == {(GROUP, "Stable")}

    rebalanced = broker.events("group_rebalanced")
    assert [(e["group_id"], e["generation_id"], e["members"]) for e in rebalanced] == [(GROUP, 1, [member])]
    assert broker.events("coordinator_loaded")[0]["partition"] == 0

    # kafka-consumer-groups --describe: the member, its partition, the committed offset and the lag.
    produce_to_t(broker, 50)
    described_cli = json.loads(
        run_cli("group", "describe", GROUP, "--bootstrap-server", broker.address, "-o", "json").stdout
    )
    assert (described_cli["state"], described_cli["coordinator"]) == ("Stable", 1)
    assert described_cli["partitions"] == [
        {
            "topic": "t",
            "partition": 0,
            "committed_offset": 42,
            "log_end_offset": 50,
            "lag": 8,
            "member_id": None,
            "host": None,
            "client_id": None,
        }
    ]
    text = run_cli("group", "describe", GROUP, "--bootstrap-server", broker.address).stdout
    assert "CURRENT-OFFSET" in text and "coordinator broker 1" in text
    listed_cli = json.loads(
        run_cli("group", "list", "--bootstrap-server", broker.address, "-o", "json").stdout
    )
    assert listed_cli["groups"] == [
        {"group": GROUP, "state": "Stable", "protocol_type": "consumer", "coordinator": 1}
    ]

    # The records in __consumer_offsets are Kafka's: the group's metadata and the offset, read back.
    log_dir = broker.log_dir / f"{OFFSETS}-0"
    loader = GroupLoader()
    loader.add_batches(b"".join(p.read_bytes() for p in sorted(log_dir.glob("*.log"))))
    # Each acknowledged commit is journaled with its batch's place and CRC, found as such in the log.
    acked = [e for e in broker.events("offsets_committed") if e["group_id"] == GROUP]
    assert acked[0]["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 42, "high_watermark": 0, "local_high_watermark": 0}
    ]
    batches = {
        h.base_offset: h.crc
        for _, h in iter_batches(b"".join(p.read_bytes() for p in sorted(log_dir.glob("*.log"))))
    }
    assert all(batches[e["base_offset"]] == e["crc"] for e in acked)
    loaded = loader.result()[GROUP]
    assert loaded.offsets[("t", 0)].offset == 42
    assert loaded.metadata is not None and loaded.metadata.generation == 1
    assert loaded.metadata.members[0].assignment == b"mine"

    # A crash and a restart: the partition is replayed, the group is back, Stable, with its offsets.
    broker.kill(signal.SIGKILL)
    broker.restart()
    assert wait_until(lambda: fetch_committed(broker), timeout=15) == 42
    again = call(broker, ApiKeys.DESCRIBE_GROUPS, {"groups": [GROUP]}, 5)["groups"][0]
    assert again["group_state"] == "Stable" and again["members"][0]["member_id"] == member

    left = call(broker, ApiKeys.LEAVE_GROUP, {"group_id": GROUP, "members": [{"member_id": member}]}, 3)
    assert left["error_code"] == 0 and left["members"][0]["error_code"] == 0
    empty = call(broker, ApiKeys.DESCRIBE_GROUPS, {"groups": [GROUP]}, 5)["groups"][0]
    assert empty["group_state"] == "Empty" and empty["members"] == []
    assert fetch_committed(broker) == 42


def test_delete_group_only_when_empty_and_the_deletion_survives_a_crash(broker: BrokerProcess) -> None:
    """kafka-consumer-groups --delete: a group with a member is not deleted (NON_EMPTY_GROUP); once the
    member left it is, with its offsets; its tombstones keep it deleted across a crash and a reload."""
    produce_to_t(broker, 10)

    def delete(*groups: str) -> subprocess.CompletedProcess[str]:
        return run_cli("group", "delete", *groups, "--bootstrap-server", broker.address, check=False)

    member = call(broker, ApiKeys.JOIN_GROUP, join_body(), 5)["member_id"]
    assert call(broker, ApiKeys.JOIN_GROUP, join_body(member), 5)["error_code"] == 0
    sync = {"group_id": GROUP, "generation_id": 1, "member_id": member, "assignments": []}
    assert call(broker, ApiKeys.SYNC_GROUP, sync, 3)["error_code"] == 0
    assert (
        call(broker, ApiKeys.OFFSET_COMMIT, commit_body(member, 1, 7), 7)["topics"][0]["partitions"][0][
            "error_code"
        ]
        == 0
    )
    refused = delete(GROUP)
    assert refused.returncode == 1
    assert f"* Group '{GROUP}' could not be deleted due to: GroupNotEmptyException" in refused.stdout
    direct = call(broker, ApiKeys.DELETE_GROUPS, {"groups_names": [GROUP, "never-seen", ""]}, 2)
    assert [(r["group_id"], r["error_code"]) for r in direct["results"]] == [
        (GROUP, Errors.NON_EMPTY_GROUP),
        ("never-seen", Errors.GROUP_ID_NOT_FOUND),
        ("", Errors.INVALID_GROUP_ID),
    ]

    left = call(broker, ApiKeys.LEAVE_GROUP, {"group_id": GROUP, "members": [{"member_id": member}]}, 3)
    assert left["error_code"] == 0
    done = delete(GROUP)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Deletion of requested consumer groups ('{GROUP}') was successful." in done.stdout
    assert fetch_committed(broker) == -1
    assert call(broker, ApiKeys.LIST_GROUPS, {}, 4)["groups"] == []
    again = delete(GROUP)
    assert again.returncode == 1 and "GroupIdNotFoundException" in again.stdout
    wait_until(lambda: broker.events("group_deleted"), timeout=10, message="the tombstones written")

    broker.kill(signal.SIGKILL)
    broker.restart()
    assert wait_until(lambda: fetch_committed(broker), timeout=15) == -1
    assert call(broker, ApiKeys.LIST_GROUPS, {}, 4)["groups"] == []


def test_console_consumer_in_a_group_resumes_at_its_committed_offset(broker: BrokerProcess) -> None:
    produce_to_t(broker, 30)

    def consume(*args: str) -> list[str]:
        out = run_cli("consume", "t", "--group", "console", "--bootstrap-server", broker.address, *args)
        return out.stdout.split()

    assert consume("--from-beginning", "--max-messages", "20") == [f"v{i}" for i in range(20)]
    # The next member starts where the group committed, not at the beginning.
    assert consume("--from-beginning", "--max-messages", "10") == [f"v{i}" for i in range(20, 30)]
    produce_to_t(broker, 5, start=30)
    assert consume("--timeout-ms", "3000") == [f"v{i}" for i in range(30, 35)]
    doc = json.loads(
        run_cli("group", "describe", "console", "--bootstrap-server", broker.address, "-o", "json").stdout
    )
    assert doc["state"] == "Empty" and doc["members"] == []
    assert [(r["committed_offset"], r["log_end_offset"], r["lag"]) for r in doc["partitions"]] == [
        (35, 35, 0)
    ]
    generations = [
        e["generation_id"] for e in broker.events("group_rebalanced") if e["group_id"] == "console"
    ]
    assert len(generations) >= 3 and generations == sorted(generations)


def test_two_console_consumers_in_a_group_read_each_record_once(broker_launcher: BrokerLauncher) -> None:
    parts = ",".join(f"t-{p}" for p in range(4))
    broker = broker_launcher.start(
        overrides={
            "initial.leader.partitions": f"{OFFSETS}-0,{parts}",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
    )

    def produce(start: int, count: int) -> None:
        body = {
            "acks": -1,
            "timeout_ms": 5000,
            "topic_data": [
                {
                    "name": "t",
                    "partition_data": [
                        {
                            "index": p,
                            "records": build_simple_batch(
                                [f"v{i}".encode() for i in range(start, start + count) if i % 4 == p]
                            ),
                        }
                        for p in range(4)
                    ],
                }
            ],
        }
        call(broker, ApiKeys.PRODUCE, body, 0)

    produce(0, 40)
    args = ["consume", "t", "--group", "duo", "--from-beginning", "--timeout-ms", "8000"]
    members = [
        subprocess.Popen(
            python_cmd(*args, "--bootstrap-server", broker.address),
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        wait_until(
            lambda: any(len(e["members"]) == 2 for e in broker.events("group_rebalanced")),
            timeout=30,
            message="a generation with both members",
        )
        produce(40, 40)
        outs = [m.communicate(timeout=60)[0].split() for m in members]
    finally:
        for m in members:
            m.kill()
    got = sorted(outs[0] + outs[1])
    assert got == sorted(f"v{i}" for i in range(80))  # every record once, across the rebalance
    assert outs[0] and outs[1]


def test_bad_group_requests_get_kafkas_errors(broker: BrokerProcess) -> None:
    resp = call(broker, ApiKeys.JOIN_GROUP, {**join_body(), "group_id": ""}, 5)
    assert resp["error_code"] == Errors.INVALID_GROUP_ID
    bad = call(broker, ApiKeys.JOIN_GROUP, {**join_body(), "session_timeout_ms": 10}, 5)
    assert bad["error_code"] == Errors.INVALID_SESSION_TIMEOUT
    # Only the coordinator writes to __consumer_offsets (Kafka's internal topic).
    produced = call(
        broker,
        ApiKeys.PRODUCE,
        {
            "acks": -1,
            "timeout_ms": 1000,
            "topic_data": [
                {"name": OFFSETS, "partition_data": [{"index": 0, "records": build_simple_batch([b"x"])}]}
            ],
        },
        0,
    )
    assert produced["responses"][0]["partition_responses"][0]["error_code"] == Errors.INVALID_TOPIC_EXCEPTION
    # Nothing a client sends crashes the coordinator: odd protocol metadata is only stored and handed on.
    odd = call(
        broker, ApiKeys.JOIN_GROUP, {**join_body(), "protocols": [{"name": "x", "metadata": b"\xff"}]}, 3
    )
    assert odd["error_code"] == 0 and odd["members"][0]["metadata"] == b"\xff"
    described = call(broker, ApiKeys.DESCRIBE_GROUPS, {"groups": [GROUP, "", "never-seen"]}, 5)["groups"]
    assert [g["group_state"] for g in described] == ["CompletingRebalance", "Dead", "Dead"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    settings = (*FAST, "offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0")
    yield from cluster_up(tmp_path / "root", settings=settings)


def test_coordinator_moves_with_the_offsets_leadership_and_committed_offsets_survive(
    cluster: Cluster,
) -> None:
    cluster.cli("topic", "create", "t", "--partitions", "1", "--replication-factor", "3")
    brokers = {b.id: b for b in cluster.info.brokers}

    def find(via: int) -> int | None:
        resp = cluster.ask(via, ApiKeys.FIND_COORDINATOR, {"key": GROUP})
        return int(resp["node_id"]) if resp["error_code"] == 0 else None

    coordinator = wait_until(lambda: find(1), timeout=30, message="a coordinator for the group")
    partition = partition_for_group(GROUP, 3)
    assert cluster.leader(OFFSETS, partition) == coordinator
    wait_until(lambda: cluster.isr_full(OFFSETS), timeout=30, message="__consumer_offsets fully replicated")

    entry = brokers[coordinator]

    async def commit(member: str, generation: int, offset: int) -> dict[str, Any]:
        return await ask(
            entry.host, entry.port, ApiKeys.OFFSET_COMMIT, commit_body(member, generation, offset), 7
        )

    def coordinator_call(api: ApiKeys, body: dict[str, Any], version: int) -> dict[str, Any]:
        return trio.run(ask, entry.host, entry.port, api, body, version)

    def committed_ok() -> bool:
        resp = trio.run(commit, "", -1, 77)
        return resp["topics"][0]["partitions"][0]["error_code"] == 0

    # A simple consumer's commit (no generation) is acknowledged once replicated (acks=all).
    wait_until(committed_ok, timeout=20, message="the commit to be acknowledged")
    first = coordinator_call(ApiKeys.JOIN_GROUP, join_body(), 5)
    assert first["error_code"] == Errors.MEMBER_ID_REQUIRED

    cluster.cli("broker", "kill", str(coordinator), "--signal", "KILL")
    survivor = next(b for b in brokers if b != coordinator)

    def new_coordinator() -> int | None:
        found = find(survivor)
        return found if found is not None and found != coordinator else None

    moved = wait_until(new_coordinator, timeout=30, message="the coordinator to move")
    new_entry = brokers[moved]

    def fetched() -> int | None:
        resp = trio.run(
            ask,
            new_entry.host,
            new_entry.port,
            ApiKeys.OFFSET_FETCH,
            {"group_id": GROUP, "topics": [{"name": "t", "partition_indexes": [0]}]},
            5,
        )
        if resp["error_code"] != 0:
            return None
        return int(resp["topics"][0]["partitions"][0]["committed_offset"])

    assert wait_until(fetched, timeout=20, message="the committed offset on the new coordinator") == 77
    loaded = cluster.broker_events(moved, "coordinator_loaded")
    assert any(e["partition"] == partition and e["offsets"] >= 1 for e in loaded)
