"""No client request stops the controller quorum (docs/controller.md, "Bounds of one operation"): real
admin clients (kafka-python, confluent-kafka) send over-large CreateTopics and CreatePartitions through a
broker, and straight to the active controller, to `isrsim cluster up` with three voters and three brokers.
Each is answered with Kafka's error at once, while a producer with acks=all goes on being acknowledged and
the quorum keeps its leader and epoch."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import trio
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidReplicationFactorError, PolicyViolationError, RequestTimedOutError

from kit.controller_quorum import describe_quorum, leader_of, voters_of
from protocol import ApiKeys, Errors
from tests.clients.conftest import bootstrap
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import request, wait_until

pytestmark = pytest.mark.integration

INT32_MAX = 2**31 - 1
# The clients' request timeout: every refusal must come well within it (the figures are printed).
REQUEST_TIMEOUT_S = 15.0
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three brokers and a quorum of three controllers."""
    yield from cluster_up(tmp_path_factory.mktemp("bounds") / "root", 3, FAST, controllers=3)


def quorum(cluster: Cluster) -> tuple[int, int, tuple[str, int]]:
    """The quorum leader's id, its epoch and its address (DESCRIBE_QUORUM to every voter)."""
    leader = leader_of(trio.run(describe_quorum, voters_of(cluster.info)))
    assert leader is not None and leader.voter.id is not None, "the quorum has no leader"
    return leader.voter.id, leader.epoch, (leader.voter.host, leader.voter.port)


def all_follow(cluster: Cluster, leader: int) -> bool:
    views = trio.run(describe_quorum, voters_of(cluster.info))
    return len(views) == 3 and all(v.answered and v.leader_id == leader for v in views)


def new_leader(cluster: Cluster, old: int) -> int | None:
    try:
        leader, _, _ = quorum(cluster)
    except AssertionError:
        return None
    return leader if leader != old else None


def acked(cluster: Cluster) -> int:
    """Records the producer has had acknowledged so far."""
    return sum(line["last_offset"] - line["base_offset"] + 1 for line in cluster.acked())


def timed(what: str, call: object) -> float:
    started = time.monotonic()
    assert callable(call)
    call()
    took = time.monotonic() - started
    print(f"{what}: answered in {took:.3f} s")
    assert took < REQUEST_TIMEOUT_S, f"{what} took {took:.1f} s"
    return took


def test_over_large_requests_are_refused_and_the_quorum_keeps_its_leader(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "flow", "--partitions", "3", "--replication-factor", "3")
    cluster.cli("topic", "create", "grow", "--partitions", "3", "--replication-factor", "3")
    before = quorum(cluster)
    deactivations = len(cluster.controller_events("controller_deactivated"))
    producer = cluster.producer("flow", 100_000, acks="all", rate=200)
    try:
        wait_until(lambda: acked(cluster) > 0, 30, message="the producer's first acknowledgements")
        kp = KafkaAdminClient(
            bootstrap_servers=bootstrap(cluster), request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000)
        )
        ck = AdminClient({"bootstrap.servers": bootstrap(cluster)})
        try:
            acks_before = acked(cluster)
            window_ms = int(time.time() * 1000)

            # 1,000,000 partitions (kafka-python, through a broker, which refuses it itself).
            def million() -> None:
                with pytest.raises(PolicyViolationError, match=EXCESSIVE_PARTITIONS) as err:
                    kp.create_topics([KpNewTopic("huge", 1_000_000, 3)])
                assert err.value.errno == Errors.POLICY_VIOLATION

            timed("CreateTopics of 1,000,000 partitions (kafka-python, broker)", million)

            # The same at the active controller itself: its own bound answers, before assigning anything.
            def at_controller() -> None:
                body = trio.run(
                    request,
                    before[2][0],
                    before[2][1],
                    ApiKeys.CREATE_TOPICS,
                    {
                        "topics": [
                            {
                                "name": "huge",
                                "num_partitions": 1_000_000,
                                "replication_factor": 3,
                                "configs": {},
                            }
                        ],
                        "timeout_ms": 5000,
                    },
                )
                [topic] = body["topics"]
                assert (topic["error_code"], topic["error_message"]) == (
                    Errors.POLICY_VIOLATION,
                    EXCESSIVE_PARTITIONS,
                )

            timed("CreateTopics of 1,000,000 partitions (the active controller)", at_controller)

            # CreatePartitions to 2^31-1 (kafka-python, forwarded to the controller).
            def int32_max() -> None:
                with pytest.raises(PolicyViolationError, match=EXCESSIVE_PARTITIONS) as err:
                    kp.create_partitions({"grow": KpNewPartitions(INT32_MAX)})
                assert err.value.errno == Errors.POLICY_VIOLATION

            timed("CreatePartitions to 2^31-1 (kafka-python, forwarded)", int32_max)

            # confluent-kafka's own limit is 100,000 partitions: still far past the controller's bound.
            def hundred_thousand() -> None:
                futures = ck.create_partitions(
                    [NewPartitions("grow", 100_000)], request_timeout=REQUEST_TIMEOUT_S
                )
                with pytest.raises(KafkaException) as err:
                    futures["grow"].result(timeout=REQUEST_TIMEOUT_S)
                error = err.value.args[0]
                assert (error.code(), error.str()) == (Errors.POLICY_VIOLATION, EXCESSIVE_PARTITIONS)

            timed("CreatePartitions to 100,000 (confluent-kafka, forwarded)", hundred_thousand)

            # 10,000 partitions pass the partition bound but not the records of one operation (with the
            # topic's own record): the controller refuses it (kafka-python, forwarded).
            def full_batch() -> None:
                with pytest.raises(PolicyViolationError, match=EXCESSIVE_BATCH):
                    kp.create_topics([KpNewTopic("full", 10_000, 3)])

            timed("CreateTopics of 10,000 partitions (kafka-python, forwarded)", full_batch)

            # A replication factor above the live brokers, however many partitions.
            def too_many_replicas() -> None:
                with pytest.raises(InvalidReplicationFactorError, match="only 3 broker"):
                    kp.create_topics([KpNewTopic("wide", 9_999, 4)])

            timed("CreateTopics with replication factor 4 of 3 brokers", too_many_replicas)

            # Nothing was created or grown.
            names = set(kp.list_topics())
            assert not names & {"huge", "full", "wide"}
            [grow] = cluster.ask(1, ApiKeys.METADATA, {"topics": [{"name": "grow"}]})["topics"]
            assert len(grow["partitions"]) == 3
            # The producer went on being acknowledged meanwhile.
            wait_until(lambda: acked(cluster) > acks_before + 100, 30, message="acknowledgements going on")
            times = sorted(
                line["acked_ms"] for line in cluster.acked() if line["acked_ms"] >= window_ms - 1000
            )
            gap_ms = max(b - a for a, b in itertools.pairwise(times))
            print(f"longest pause between acknowledgements meanwhile: {gap_ms} ms")
            assert gap_ms < REQUEST_TIMEOUT_S * 1000
        finally:
            kp.close()
        after = quorum(cluster)
        assert after[:2] == before[:2], f"quorum leader and epoch before {before[:2]}, after {after[:2]}"
        assert len(cluster.controller_events("controller_deactivated")) == deactivations
    finally:
        producer.terminate()
        try:
            producer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            producer.kill()
            producer.wait()


def test_a_request_a_controller_does_not_answer_is_not_sent_to_the_next(cluster: Cluster) -> None:
    """A forwarded CreateTopics written to an active controller that never answers (paused here: as one
    that a request had stopped) is answered REQUEST_TIMED_OUT, and the broker does not send it on to the next
    active controller: the topic is created nowhere."""
    leader_id, _, _ = quorum(cluster)
    pid = cluster.info.controller_by_id(leader_id).pid
    assert pid is not None
    kp = KafkaAdminClient(bootstrap_servers=bootstrap(cluster), request_timeout_ms=60_000)
    try:
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(RequestTimedOutError) as err:
                kp.create_topics([KpNewTopic("unanswered", 1, 1)], timeout_ms=5000)
            took = time.monotonic() - started
            print(f"CreateTopics at a paused controller: REQUEST_TIMED_OUT in {took:.1f} s")
            assert err.value.errno == Errors.REQUEST_TIMED_OUT
            assert "not answer" in str(err.value) or "was lost" in str(err.value)
            successor = wait_until(lambda: new_leader(cluster, leader_id), 30, message="a new quorum leader")
        finally:
            os.kill(pid, signal.SIGCONT)
        assert successor != leader_id
        # The new active controller never got it, nor did the old one act on it once resumed (it follows).
        wait_until(lambda: all_follow(cluster, successor), 30, message="the resumed voter following")
        [topic] = cluster.ask(1, ApiKeys.METADATA, {"topics": [{"name": "unanswered"}]})["topics"]
        assert topic["error_code"] == Errors.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        kp.close()
