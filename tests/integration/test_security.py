"""A cluster made with `isrsim cluster up --secure` (SASL_SSL everywhere), shared by the module's tests: it
replicates (the fetchers and the controller authenticate as `broker`), the CLI works end to end from the
root's client.properties, secrets are 0600, and a client without credentials gets nothing served: a wrong
password gets SASL_AUTHENTICATION_FAILED (58) and a closed connection, a plaintext client gets nothing that
parses, and cluster actions before authentication close the connection unanswered, changing nothing. With the
authorizer on, an authenticated user that is not a super user gets 31 for every cluster action, including a
follower FETCH sent while the real followers are paused, and 29 from produce until `isrsim acl add` grants
it Write."""

from __future__ import annotations

import json
import os
import signal
import ssl
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kit.cluster_files import ProcessEntry
from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, open_connection
from protocol.errors import Errors
from protocol.framing import FrameDecoder, decode_response, encode_request
from protocol.records import build_simple_batch
from protocol.security import AuthenticationError, ClientSecurity
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import request, wait_until

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


def test_api_versions_before_authentication_lists_the_sasl_apis(secure_cluster: Cluster) -> None:
    info = secure_cluster.info
    for entry in (info.controller, info.brokers[0]):
        frames = trio.run(
            raw_exchange,
            entry,
            secure_cluster.root,
            [(ApiKeys.API_VERSIONS, {}), (ApiKeys.METADATA, {"topics": None})],  # METADATA: closed
        )
        assert frames is not None and len(frames) == 1
        keys = {k["api_key"] for k in decode_response(frames[0])[1]["api_keys"]}
        assert {ApiKeys.SASL_HANDSHAKE, ApiKeys.SASL_AUTHENTICATE, ApiKeys.METADATA} <= keys


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
    attacks = the_issue_attacks(before_meta)
    for target, api, body in attacks:
        frames = trio.run(raw_exchange, c.info.broker(target), c.root, [(api, body)])
        assert frames == [], f"{ApiKeys(api).name} was answered before authentication"
    assert c.metadata(TOPIC) == before_meta
    assert c.replica_offsets(TOPIC) == before_offsets
    assert c.isr_full(TOPIC)


# ------------------------------------------------------------------------------------------- authorization

MALLORY, MALLORY_PASSWORD = "mallory", "mallory-secret-1"
WRITER, WRITER_PASSWORD = "writer", "writer-secret-1"


def add_user(c: Cluster, name: str, password: str) -> None:
    """`isrsim user add` as admin, then waits until every broker has the new credentials (the controller
    sends them in UPDATE_METADATA)."""
    added = c.cli("user", "add", name, "--password", password)
    assert "it has no ACLs yet" in added.stdout
    for b in c.info.brokers:
        wait_until(
            lambda b=b: trio.run(authenticates, b, c.root, name, password),
            timeout=20,
            message=f"user {name} known to broker {b.id}",
        )


@pytest.fixture(scope="module")
def mallory(with_data: Cluster) -> Cluster:
    """An ordinary user that even has All on the topic (but nothing on the cluster)."""
    add_user(with_data, MALLORY, MALLORY_PASSWORD)
    with_data.cli(
        "acl", "add", "--allow-principal", f"User:{MALLORY}", "--operation", "All", "--topic", TOPIC
    )
    return with_data


def test_an_authenticated_user_cannot_act_as_the_cluster(mallory: Cluster) -> None:
    """The issue's attacks again, by a user that authenticated and even has All on the topic: each is
    answered CLUSTER_AUTHORIZATION_FAILED (31), and leadership and data are unchanged afterwards."""
    c = mallory
    before_meta = c.metadata(TOPIC)
    before_offsets = c.replica_offsets(TOPIC)
    for target, api, body in the_issue_attacks(before_meta):
        [answer] = trio.run(
            sasl_exchange, c.info.broker(target), c.root, MALLORY, MALLORY_PASSWORD, [(api, body)]
        )
        assert answer is not None, f"{ApiKeys(api).name}: connection closed"  # 31 is what Kafka answers
        assert answer["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED, (ApiKeys(api).name, answer)
        assert f"User:{MALLORY}" in answer["error_message"]
    # Nor may it grant itself ClusterAction.
    escalate = (
        "acl",
        "add",
        "--allow-principal",
        f"User:{MALLORY}",
        "--operation",
        "ClusterAction",
        "--cluster",
    )
    refused = c.cli(*escalate, "--user", MALLORY, "--password", MALLORY_PASSWORD, check=False)
    assert refused.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
    assert c.metadata(TOPIC) == before_meta
    assert c.replica_offsets(TOPIC) == before_offsets
    assert c.isr_full(TOPIC)


def test_a_fake_follower_fetch_cannot_acknowledge_a_write_while_the_followers_are_paused(
    mallory: Cluster,
) -> None:
    """The third attack as filed: the real followers of a partition paused, an acks=all write appended at the
    leader and waiting there, and an authenticated user fetching as each follower from just past the write
    (what would move the HW over it). Each fetch gets 31 and the write is never acknowledged; after the
    followers resume, every replica converges."""
    c = mallory
    meta = c.metadata(TOPIC)
    leader = c.info.broker(meta[0]["leader_id"])
    followers = [r for r in meta[0]["replica_nodes"] if r != leader.id]
    template = next(body for _, api, body in the_issue_attacks(meta) if api == ApiKeys.FETCH)
    leo = c.replica_offsets(TOPIC)[(leader.id, 0)][0]
    fake_fetches = []
    for f in followers:
        fake = json.loads(json.dumps(template))
        fake["replica_id"] = f
        fake["topics"][0]["partitions"][0].update(fetch_offset=leo + 1, current_leader_epoch=-1)
        fake_fetches.append((int(ApiKeys.FETCH), fake))
    for f in followers:
        os.kill(c.info.broker(f).pid, signal.SIGSTOP)  # as `isrsim broker pause`, without a CLI process each
    try:

        async def leader_leo() -> int:
            state = await request(
                leader.host,
                leader.port,
                ApiKeys.DESCRIBE_REPLICA_STATE,
                {"topics": None},
                security=c.security,
            )
            return next(
                int(p["log_end_offset"])
                for p in state["partitions"]
                if p["topic"] == TOPIC and p["partition"] == 0
            )

        async def attack() -> tuple[dict[str, Any], list[dict[str, Any] | None]]:
            produced: dict[str, Any] = {}

            async def write() -> None:
                body = produce_request_body(TOPIC, 0, acks=-1, timeout_ms=2000)
                produced.update(
                    await request(leader.host, leader.port, ApiKeys.PRODUCE, body, security=c.security)
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                with trio.fail_after(10):  # the write is appended and waits in the leader's purgatory
                    while await leader_leo() <= leo:
                        await trio.sleep(0.02)
                fetched = await sasl_exchange(leader, c.root, MALLORY, MALLORY_PASSWORD, fake_fetches)
            return produced, fetched

        produced, fetched = trio.run(attack)
        for answer in fetched:
            assert answer is not None and answer["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED, answer
        written = produced["responses"][0]["partition_responses"][0]
        assert written["error_code"] != Errors.NONE, (
            "an acks=all write was acknowledged with every follower paused"
        )
    finally:
        for f in followers:
            os.kill(c.info.broker(f).pid, signal.SIGCONT)
    wait_until(lambda: c.isr_full(TOPIC), timeout=60, message="full ISR after the followers resumed")
    c.wait_converged(TOPIC, PARTITIONS)
    assert c.assert_no_acked_batch_lost(TOPIC, PARTITIONS) > 0


def test_produce_needs_write_and_acl_add_grants_it(with_data: Cluster) -> None:
    c = with_data
    add_user(c, WRITER, WRITER_PASSWORD)
    as_writer = ("--user", WRITER, "--password", WRITER_PASSWORD)
    leader = c.info.broker(c.metadata(TOPIC)[0]["leader_id"])
    body = produce_request_body(TOPIC, 0, acks=-1, timeout_ms=10_000)

    def produce_error() -> int:
        [answer] = trio.run(sasl_exchange, leader, c.root, WRITER, WRITER_PASSWORD, [(ApiKeys.PRODUCE, body)])
        assert answer is not None
        return int(answer["responses"][0]["partition_responses"][0]["error_code"])

    # A new user has no ACLs: 29 from produce, and the CLI says why at once.
    assert produce_error() == Errors.TOPIC_AUTHORIZATION_FAILED
    refused = c.cli("produce", TOPIC, "--count", "10", "--no-progress", *as_writer, check=False, timeout=60)
    assert refused.returncode != 0 and "TOPIC_AUTHORIZATION_FAILED" in refused.stderr + refused.stdout
    c.cli("acl", "add", "--allow-principal", f"User:{WRITER}", "--operation", "Write", "--topic", TOPIC)
    listed = c.cli("acl", "list", "--principal", f"User:{WRITER}")
    assert "operation=WRITE, permissionType=ALLOW" in listed.stdout
    wait_until(lambda: produce_error() == Errors.NONE, timeout=20, message="the Write ACL at the leader")
    produced = c.cli(
        "produce", TOPIC, "--count", "10", "--acks", "all", "--no-progress", *as_writer, timeout=60
    )
    assert "10 records acknowledged" in produced.stdout, produced.stdout + produced.stderr
    # Write is not Read.
    unread = c.cli(
        "consume", TOPIC, "--from-beginning", "--max-records", "1", *as_writer, check=False, timeout=60
    )
    assert unread.returncode != 0 and "TOPIC_AUTHORIZATION_FAILED" in unread.stderr
    c.cli("acl", "remove", "--allow-principal", f"User:{WRITER}", "--topic", TOPIC)
    wait_until(
        lambda: produce_error() == Errors.TOPIC_AUTHORIZATION_FAILED, timeout=20, message="the ACL removed"
    )


# ------------------------------------------------------------------------------------------- helpers
def the_issue_attacks(meta: dict[int, dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(target broker, API, body) of each attack of the issue on partition 0: STOP_REPLICA deleting the
    follower's replica, LEADER_AND_ISR making the follower a second leader with epoch+1, a FETCH to the leader
    claiming to be the follower (far ahead), and NET_FAULTS."""
    leader = meta[0]["leader_id"]
    follower = next(r for r in meta[0]["replica_nodes"] if r != leader)
    epoch = meta[0]["leader_epoch"]
    return [
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
                                "replicas": meta[0]["replica_nodes"],
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


def produce_request_body(topic: str, partition: int, *, acks: int, timeout_ms: int) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": partition, "records": build_simple_batch([b"authz"])}],
            }
        ],
    }


async def sasl_exchange(
    entry: ProcessEntry, root: Path, user: str, password: str, requests: list[tuple[int, dict[str, Any]]]
) -> list[dict[str, Any] | None]:
    """TLS and SASL/SCRAM as ``user`` (the cluster's client.properties with another user), then each request
    in turn: its response body, or None once the server closed the connection."""
    security = ClientSecurity.from_file(root / "client.properties").with_user(user, password)
    answers: list[dict[str, Any] | None] = []
    async with open_connection(entry.host, entry.port, client_id="authz-test", security=security) as conn:
        for api, body in requests:
            try:
                answers.append(await conn.request(api, body, timeout=20))
            except ConnectionClosed:
                answers.append(None)
    return answers


async def authenticates(entry: ProcessEntry, root: Path, user: str, password: str) -> bool:
    try:
        await sasl_exchange(entry, root, user, password, [])
    except AuthenticationError:
        return False
    return True
