"""The controller quorum through Kafka's own clients and through any address (SPEC sections 10 and 11,
docs/clients.md, docs/controller.md): DESCRIBE_QUORUM forwarded by brokers (kafka-python's
``describe_metadata_quorum``), a controller's listener in Kafka's encoding (kcat, raw requests), and
``isrsim topic`` given a broker's address or one voter that is not the active controller."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
import trio
from kafka.admin import KafkaAdminClient

from kit.controller_quorum import describe_quorum, leader_of, voters_of
from protocol import ApiKeys, Errors, kafka_codec
from tests.clients.conftest import kcat
from tests.clients.kafka_wire import KafkaWire
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import request, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.clients]

METADATA_TOPIC = "__cluster_metadata"


@pytest.fixture(scope="module")
def quorum_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two brokers and a quorum of three controllers."""
    yield from cluster_up(tmp_path_factory.mktemp("quorum") / "root", 2, FAST, controllers=3)


def roles(cluster: Cluster) -> tuple[int, list[int]]:
    """The active controller's id and the other voters' ids."""
    info = cluster.info
    leader = leader_of(trio.run(describe_quorum, voters_of(info)))
    assert leader is not None and leader.voter.id is not None
    return leader.voter.id, [c.id for c in info.controllers if c.id != leader.voter.id]


def address(cluster: Cluster, node_id: int) -> str:
    info = cluster.info
    entry = info.controller_by_id(node_id) if node_id >= 1000 else info.broker(node_id)
    return f"{entry.host}:{entry.port}"


def test_kafka_python_describes_the_quorum_through_a_broker(quorum_cluster: Cluster) -> None:
    info = quorum_cluster.info
    leader_id, _ = roles(quorum_cluster)
    client = KafkaAdminClient(bootstrap_servers=address(quorum_cluster, 1), request_timeout_ms=15000)
    try:
        before_ms = int(time.time() * 1000)
        described = client.describe_metadata_quorum()
    finally:
        client.close()
    (topic,) = described["topics"]
    (partition,) = topic["partitions"]
    assert topic["topic_name"] == METADATA_TOPIC
    assert partition["error"] is None
    assert partition["leader_id"] == leader_id and partition["leader_epoch"] >= 1
    assert partition["high_watermark"] > 0
    voters = {v["replica_id"]: v for v in partition["current_voters"]}
    assert set(voters) == {c.id for c in info.controllers}
    # the leader describes itself as of now (Kafka's LeaderState.describeReplicaState)
    me = voters[leader_id]
    assert me["log_end_offset"] >= partition["high_watermark"]
    assert me["last_fetch_timestamp"] >= before_ms - 1000
    assert me["last_caught_up_timestamp"] == me["last_fetch_timestamp"]
    # version 2's nodes: every voter's address
    nodes = {n["node_id"]: n["listeners"][0] for n in described["nodes"]}
    assert {i: f"{li['host']}:{li['port']}" for i, li in nodes.items()} == {
        c.id: f"{c.host}:{c.port}" for c in info.controllers
    }


async def _kafka_calls(host: str, port: int) -> tuple[dict[int, tuple[int, int]], list[dict[str, object]]]:
    async with KafkaWire(host, port) as wire:
        versions = await wire.call(ApiKeys.API_VERSIONS, 3, {})
        assert versions["error_code"] == 0
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions["api_keys"]}
        body = {"topics": [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]}
        answers = [
            await wire.call(ApiKeys.DESCRIBE_QUORUM, v, body, correlation_id=20 + v) for v in (0, 1, 2)
        ]
    return ranges, answers


def test_a_controller_speaks_kafkas_encoding(quorum_cluster: Cluster) -> None:
    leader_id, followers = roles(quorum_cluster)
    for node_id in [leader_id, *followers]:
        host, port = address(quorum_cluster, node_id).split(":")
        ranges, answers = trio.run(_kafka_calls, host, int(port))
        assert ranges[ApiKeys.API_VERSIONS] == (0, 3)
        assert ranges[ApiKeys.DESCRIBE_QUORUM] == (0, 2)
        for key in (ApiKeys.CREATE_TOPICS, ApiKeys.DELETE_TOPICS, ApiKeys.DESCRIBE_CONFIGS):
            assert key in ranges
        assert ApiKeys.BROKER_HEARTBEAT not in ranges and ApiKeys.VOTE not in ranges
        for answer in answers:
            assert answer["error_code"] == 0
            (partition,) = answer["topics"][0]["partitions"]
            assert partition["leader_id"] == leader_id
            if node_id == leader_id:
                assert partition["error_code"] == 0
                assert len(partition["current_voters"]) == 3
            else:
                # a voter that does not lead says so and names the leader, as Kafka's does
                assert partition["error_code"] == Errors.NOT_LEADER_OR_FOLLOWER


async def _kip511(host: str, port: int) -> tuple[int, set[int], int]:
    async with KafkaWire(host, port) as wire:
        frame = struct.pack(">hhih", 18, 9, 5, 4) + b"next" + b"\x00" + b"\x00\x00"
        await wire.send(struct.pack(">I", len(frame)) + frame)
        payload = await wire.receive_frame()
        assert payload is not None, "the controller closed the connection on a newer ApiVersions"
        _, body = kafka_codec.decode_response(18, 0, payload)
        after = await wire.call(ApiKeys.API_VERSIONS, 3, {}, correlation_id=6)
    return int(body["error_code"]), {k["api_key"] for k in body["api_keys"]}, int(after["error_code"])


def test_a_controller_answers_a_newer_api_versions_with_its_ranges(quorum_cluster: Cluster) -> None:
    host, port = address(quorum_cluster, quorum_cluster.info.controllers[0].id).split(":")
    error, keys, after = trio.run(_kip511, host, int(port))
    assert error == Errors.UNSUPPORTED_VERSION
    assert {18, 19, 20, 32, 55, 60} <= keys
    assert after == 0  # the connection goes on (KIP-511)


def test_kcat_against_every_controller(quorum_cluster: Cluster) -> None:
    info = quorum_cluster.info
    for c in info.controllers:
        out = kcat("-b", f"{c.host}:{c.port}", "-L", "-m", "15")
        assert "Disconnected while requesting ApiVersion" not in out.stderr
        assert out.returncode == 0, out.stderr
        assert f" {len(info.brokers)} brokers:" in out.stdout
        for b in info.brokers:
            assert f"broker {b.id} at {b.host}:{b.port}" in out.stdout


def test_brokers_serve_the_admin_apis_over_msgpack(quorum_cluster: Cluster) -> None:
    b = quorum_cluster.info.brokers[0]
    resp = trio.run(request, b.host, b.port, ApiKeys.API_VERSIONS, {})
    keys = {k["api_key"] for k in resp["api_keys"]}
    assert {19, 20, 32, 55, 60} <= keys
    described = trio.run(request, b.host, b.port, ApiKeys.DESCRIBE_QUORUM, {})
    partition = described["topics"][0]["partitions"][0]
    assert partition["error_code"] == 0 and partition["leader_id"] >= 1000


def _topic(cluster: Cluster, bootstrap: str, *args: str) -> str:
    out = run_cli("topic", *args, "--bootstrap-server", bootstrap, check=False, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.parametrize("through", ["broker", "follower", "two-followers"])
def test_topic_commands_through_any_address(quorum_cluster: Cluster, through: str) -> None:
    _, followers = roles(quorum_cluster)
    if through == "broker":
        bootstrap = address(quorum_cluster, 2)
    elif through == "follower":
        bootstrap = address(quorum_cluster, followers[0])
    else:
        bootstrap = ",".join(address(quorum_cluster, f) for f in followers)
    name = f"via-{through}"
    assert "created topic" in _topic(
        quorum_cluster, bootstrap, "create", name, "--partitions", "2", "--replication-factor", "2"
    )
    described = _topic(quorum_cluster, bootstrap, "describe", name)
    assert name in described and "2 partition(s)" in described
    assert name in _topic(quorum_cluster, bootstrap, "list").split()
    assert "deleted topic" in _topic(quorum_cluster, bootstrap, "delete", name)


def test_topic_commands_still_say_when_nothing_answers(quorum_cluster: Cluster) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = run_cli("topic", "list", "--bootstrap-server", f"127.0.0.1:{port}", check=False, timeout=60)
    assert out.returncode == 1
    assert f"nothing is listening at 127.0.0.1:{port}" in out.stderr


def test_health_still_tells_a_broker_from_a_voter(quorum_cluster: Cluster) -> None:
    """Brokers now serve DESCRIBE_QUORUM (forwarded): the healthcheck still judges a broker by its state."""
    leader_id, _ = roles(quorum_cluster)
    assert "broker 1 RUNNING" in run_cli("health", address(quorum_cluster, 1)).stdout
    voter = quorum_cluster.info.controllers[0]
    assert f"quorum leader {leader_id}" in run_cli("health", f"{voter.host}:{voter.port}").stdout
