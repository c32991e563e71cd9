"""A cluster made with `isrsim cluster up --secure` (SASL_SSL everywhere), shared by the module's tests: it
replicates (the fetchers and the controller authenticate as `broker`), the CLI works end to end from the
root's client.properties, secrets are 0600, and a client without credentials gets nothing served: a wrong
password gets SASL_AUTHENTICATION_FAILED (58) and a closed connection, a plaintext client gets nothing that
parses, and cluster actions before authentication close the connection unanswered, changing nothing."""

from __future__ import annotations

import ssl
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from cli.cluster_files import ProcessEntry
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.framing import FrameDecoder, decode_response, encode_request
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import wait_until

TOPIC = "secure"
PARTITIONS = 2


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster_root = tmp_path_factory.mktemp("secure") / "root"
    yield from cluster_up(cluster_root, secure=True)


@pytest.fixture(scope="module")
def with_data(secure_cluster: Cluster) -> Cluster:
    """The topic created, written and read through the CLI (client.properties), replicated to every ISR."""
    c = secure_cluster
    c.cli("topic", "create", TOPIC, "--partitions", str(PARTITIONS), "--replication-factor", "3")
    produced = c.cli("produce", TOPIC, "--count", "300", "--acks", "all", "--no-progress")
    assert "300 records acknowledged" in produced.stdout, produced.stdout + produced.stderr
    wait_until(lambda: c.isr_full(TOPIC), timeout=30, message="full ISR on the secure cluster")
    c.wait_converged(TOPIC, PARTITIONS)
    return c


def test_cli_end_to_end_and_replication(with_data: Cluster) -> None:
    c = with_data
    consumed = c.cli("consume", TOPIC, "--from-beginning", "--max-records", "300")
    assert "Processed a total of 300 messages" in consumed.stdout + consumed.stderr
    status = c.cli("cluster", "status")
    assert TOPIC in status.stdout
    assert c.assert_no_acked_batch_lost(TOPIC, PARTITIONS) > 0
    # The followers fetched over SASL_SSL: each partition's replicas hold one log end offset, 300 in all.
    offsets = c.replica_offsets(TOPIC)
    per_partition = {p: {leo for (_, q), (leo, _) in offsets.items() if q == p} for p in range(PARTITIONS)}
    assert all(len(leos) == 1 for leos in per_partition.values()), offsets
    assert sum(next(iter(leos)) for leos in per_partition.values()) == 300


def test_secret_files_are_0600_and_hold_no_password_in_the_clear(secure_cluster: Cluster) -> None:
    root = secure_cluster.root
    props = dict(
        line.split("=", 1)
        for line in (root / "client.properties").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.username"] == "admin"
    info = secure_cluster.info
    assert info.settings.get("secure") is True
    secrets = [root / "client.properties", root / "security" / "ca-key.pem", Path(info.controller.config)]
    for b in info.brokers:
        credentials = Path(b.data_dir) / "security" / "credentials.json"
        secrets += [Path(b.config), Path(b.dir) / "security" / "keystore.pem", credentials]
        assert props["sasl.password"] not in credentials.read_text()  # salted, as Kafka stores SCRAM
    for path in secrets:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_wrong_password_gets_58_and_a_closed_connection(secure_cluster: Cluster) -> None:
    broker = secure_cluster.info.brokers[0]
    frames = trio.run(
        raw_exchange,
        broker,
        secure_cluster.root,
        [
            (ApiKeys.SASL_HANDSHAKE, {"mechanism": "PLAIN"}),
            (ApiKeys.SASL_AUTHENTICATE, {"auth_bytes": b"\0admin\0not-the-password"}),
            (ApiKeys.METADATA, {"topics": None}),
        ],
    )
    assert frames is not None
    answers = [decode_response(f) for f in frames]
    assert [cid for cid, _ in answers] == [0, 1], "nothing is served after a failed authentication"
    assert answers[1][1]["error_code"] == Errors.SASL_AUTHENTICATION_FAILED
    # The CLI says so, and does not retry for ever.
    refused = secure_cluster.cli("topic", "list", "--user", "admin", "--password", "wrong", check=False)
    assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr


def test_a_plaintext_client_on_a_tls_listener_gets_nothing_that_parses(secure_cluster: Cluster) -> None:
    broker = secure_cluster.info.brokers[0]
    raw = trio.run(plaintext_exchange, broker.host, broker.port)
    decoder = FrameDecoder(1 << 20)
    parsed: list[Any] = []
    try:
        decoder.feed(raw)
        while (frame := decoder.next_frame()) is not None:
            parsed.append(decode_response(frame))
    except Exception:
        pass
    assert parsed == [], raw[:64]


def test_cluster_actions_before_authentication_are_not_served(with_data: Cluster) -> None:
    """The issue's attacks, by a client that has TLS but no credentials: STOP_REPLICA deleting a replica,
    LEADER_AND_ISR making a follower leader, a FETCH claiming to be a replica, and NET_FAULTS: each closes the
    connection unanswered, and leadership and data are unchanged afterwards."""
    c = with_data
    before_meta = c.metadata(TOPIC)
    before_offsets = c.replica_offsets(TOPIC)
    leader = before_meta[0]["leader_id"]
    follower = next(r for r in before_meta[0]["replica_nodes"] if r != leader)
    epoch = before_meta[0]["leader_epoch"]
    attacks: list[tuple[int, int, dict[str, Any]]] = [
        (
            follower,
            ApiKeys.STOP_REPLICA,
            {
                "controller_id": 1000,
                "controller_epoch": 99,
                "broker_epoch": -1,
                "topic_states": [
                    {
                        "topic_name": TOPIC,
                        "partition_states": [
                            {"partition_index": 0, "leader_epoch": epoch + 1, "delete_partition": True}
                        ],
                    }
                ],
            },
        ),
        (
            follower,
            ApiKeys.LEADER_AND_ISR,
            {
                "controller_id": 1000,
                "controller_epoch": 99,
                "broker_epoch": -1,
                "topic_states": [
                    {
                        "topic_name": TOPIC,
                        "partition_states": [
                            {
                                "partition_index": 0,
                                "controller_epoch": 99,
                                "leader": follower,
                                "leader_epoch": epoch + 1,
                                "isr": [follower],
                                "partition_epoch": 99,
                                "replicas": before_meta[0]["replica_nodes"],
                                "is_new": False,
                            }
                        ],
                    }
                ],
                "live_leaders": [],
            },
        ),
        (
            leader,
            ApiKeys.FETCH,
            {
                "replica_id": follower,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": TOPIC,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": epoch,
                                "fetch_offset": 10_000,
                                "log_start_offset": 0,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
                "forgotten_topics_data": [],
            },
        ),
        (leader, ApiKeys.NET_FAULTS, {"action": "set", "rules": []}),
    ]
    for target, api, body in attacks:
        frames = trio.run(raw_exchange, c.info.broker(target), c.root, [(api, body)])
        assert frames == [], f"{ApiKeys(api).name} was answered before authentication"
    assert c.metadata(TOPIC) == before_meta
    assert c.replica_offsets(TOPIC) == before_offsets
    assert c.isr_full(TOPIC)


# ------------------------------------------------------------------------------------------- helpers


async def raw_exchange(
    entry: ProcessEntry, root: Path, requests: list[tuple[int, dict[str, Any]]]
) -> list[bytes] | None:
    """TLS to ``entry`` trusting the cluster's CA, ``requests`` pipelined, then every frame until the server
    closes the connection."""
    ctx = ssl.create_default_context(cafile=str(root / "security" / "ca.pem"))
    stream = await trio.open_tcp_stream(entry.host, entry.port)
    tls = trio.SSLStream(stream, ctx, server_hostname=entry.host)
    await tls.send_all(
        b"".join(encode_request(api, 0, i, "attacker", body) for i, (api, body) in enumerate(requests))
    )
    decoder = FrameDecoder(1 << 24)
    frames: list[bytes] = []
    with trio.fail_after(20):
        while True:
            try:
                data = await tls.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            if not data:
                break
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
    await trio.aclose_forcefully(tls)
    return frames


async def plaintext_exchange(host: str, port: int) -> bytes:
    stream = await trio.open_tcp_stream(host, port)
    await stream.send_all(encode_request(ApiKeys.METADATA, 0, 1, "plaintext", {"topics": None}))
    raw = b""
    with trio.fail_after(20):
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                break
            if not data:
                break
            raw += data
    await stream.aclose()
    return raw
