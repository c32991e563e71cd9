"""`isrsim cluster up --controllers 1` (SPEC §11): one controller is a Raft quorum of one voter, laid out
and run as N voters are: `controller-1000/` with `__cluster_metadata-0` and `quorum-state`, `quorum_state`
events, DESCRIBE_QUORUM answered, a restart that bumps the quorum epoch. Also kafka-topics' filters
(`--under-min-isr-partitions`, `--at-min-isr-partitions`, `--exclude-internal`) on the same cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from kit.controller_quorum import describe_quorum, voters_of
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import events, run_cli, wait_until

pytestmark = pytest.mark.integration

SETTINGS = (
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "offsets.topic.num.partitions=2",
)


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("onevoter") / "c"
    for cluster in cluster_up(root, brokers=1, settings=SETTINGS, controllers=1):
        cluster.cli("topic", "create", "t", "--partitions", "2", "--replication-factor", "1")
        cluster.cli(
            "topic", "create", "strict", "--partitions", "1", "--replication-factor", "1",
            "--config", "min.insync.replicas=2",
        )  # fmt: skip
        yield cluster


def test_one_controller_is_a_quorum_of_one_voter(one: Cluster) -> None:
    info = one.info
    c = info.controller
    # Laid out as N voters are: controller-<id>/, cluster.json's `controllers` and `controller`.
    assert [x.id for x in info.controllers] == [1000] and Path(c.dir) == one.root / "controller-1000"
    assert not (one.root / "controller").exists()
    raw = json.loads((one.root / "cluster.json").read_text())
    assert [x["id"] for x in raw["controllers"]] == [1000] and raw["controller"] == raw["controllers"][0]
    props = Path(c.config).read_text()
    assert f"controller.quorum.voters=1000@127.0.0.1:{c.port}\n" in props
    assert "`isrsim controller restart 1000 --force` to apply" in props.splitlines()[0]
    assert f"controller.quorum.voters=1000@127.0.0.1:{c.port}\n" in Path(info.brokers[0].config).read_text()
    # Its state is the metadata log, not a cluster-metadata.json.
    assert (Path(c.dir) / "quorum-state").is_file()
    assert list((Path(c.dir) / "__cluster_metadata-0").glob("*.log"))
    assert not (Path(c.dir) / "cluster-metadata.json").exists()
    # It elected itself: candidate, then leader of epoch 1, with no other vote asked.
    roles = [(e["role"], e["epoch"]) for e in events(c.journal, "quorum_state")]
    assert ("candidate", 1) in roles and ("leader", 1) in roles
    assert roles.index(("candidate", 1)) < roles.index(("leader", 1))
    assert events(c.journal, "metadata_committed")
    # DESCRIBE_QUORUM (55) is served (a controller without a quorum knows no API 55).
    (view,) = trio.run(describe_quorum, voters_of(info), 5.0)
    assert view.answered and view.error_code == Errors.NONE
    assert view.leader_id == 1000 and view.epoch >= 1 and view.high_watermark > 0
    assert [v["replica_id"] for v in view.voters] == [1000]
    status = json.loads(one.cli("cluster", "status", "-o", "json").stdout)
    assert status["quorum"]["leader_id"] == 1000
    assert [(x["id"], x["role"], x["active"]) for x in status["controllers"]] == [(1000, "leader", True)]
    # dump-log reads the metadata log, given as kafka-dump-log.sh --files.
    segments = sorted((Path(c.dir) / "__cluster_metadata-0").glob("*.log"))
    dumped = json.loads(run_cli("dump-log", "--files", ",".join(map(str, segments)), "-o", "json").stdout)
    assert [d["file"] for d in dumped] == [str(s) for s in segments]
    assert all(b["is_valid"] for d in dumped for b in d["batches"])


def test_a_restart_bumps_the_quorum_epoch_and_the_voter_leads_again(one: Cluster) -> None:
    c = one.info.controller
    before = max(e["epoch"] for e in events(c.journal, "quorum_state") if e["role"] == "leader")
    out = one.cli("controller", "restart", "--force").stdout
    assert "controller 1000 restarted" in out
    (view,) = trio.run(describe_quorum, voters_of(one.info), 5.0)
    assert view.leader_id == 1000 and view.epoch > before
    # The metadata log kept everything: the topics are there and a new one can be made.
    listed = one.cli("topic", "list").stdout.split()
    assert {"t", "strict"} <= set(listed)
    one.cli("topic", "create", "after", "--partitions", "1", "--replication-factor", "1")
    # The brokers follow the new epoch.
    wait_until(
        lambda: any(e.get("controller_epoch", 0) > before for e in one.broker_events(1)),
        timeout=20,
        message="broker 1 obeying the restarted controller's epoch",
    )


def _partitions(one: Cluster, *flags: str) -> set[tuple[str, int]]:
    topics = json.loads(one.cli("topic", "describe", *flags, "-o", "json").stdout)
    return {(t["name"], p["partition"]) for t in topics for p in t["partitions"]}


def test_topic_describe_min_isr_filters_as_kafka_topics(one: Cluster) -> None:
    # t: min.insync.replicas 1 (the default), ISR of 1: at min ISR. strict: min.insync.replicas 2, ISR of
    # 1: under min ISR (kafka-topics: ISR size < min.insync.replicas, or no leader).
    assert _partitions(one, "t", "--at-min-isr-partitions") == {("t", 0), ("t", 1)}
    assert _partitions(one, "strict", "--at-min-isr-partitions") == set()
    assert _partitions(one, "strict", "--under-min-isr-partitions") == {("strict", 0)}
    assert _partitions(one, "t", "--under-min-isr-partitions") == set()
    # Several filters: a partition matching any of them is shown (kafka-topics' DescribeOptions).
    both = _partitions(one, "--under-min-isr-partitions", "--at-min-isr-partitions")
    assert {("t", 0), ("t", 1), ("strict", 0)} <= both
    # The table: only the matching partitions, no topic lines; nothing at all when none matches.
    text = one.cli("topic", "describe", "--under-min-isr-partitions").stdout
    assert "strict" in text and "Topic: " not in text and "1 partition(s)" in text
    assert one.cli("topic", "describe", "t", "--under-min-isr-partitions").stdout == ""
    assert one.cli("topic", "describe", "t", "--under-replicated-partitions").stdout == ""


def test_exclude_internal_hides_consumer_offsets(one: Cluster) -> None:
    # The first FindCoordinator creates __consumer_offsets (as Kafka does).
    def coordinator() -> bool:
        resp = one.ask(1, ApiKeys.FIND_COORDINATOR, {"key": "g"})
        return resp.get("error_code") == Errors.NONE

    wait_until(coordinator, timeout=30, message="a coordinator for group g")
    assert "__consumer_offsets" in one.cli("topic", "list").stdout.split()
    listed = one.cli("topic", "list", "--exclude-internal").stdout.split()
    assert "__consumer_offsets" not in listed and {"t", "strict"} <= set(listed)
    described = json.loads(one.cli("topic", "describe", "--exclude-internal", "-o", "json").stdout)
    assert "__consumer_offsets" not in {t["name"] for t in described}
    assert "__consumer_offsets" in {
        t["name"] for t in json.loads(one.cli("topic", "describe", "-o", "json").stdout)
    }


def test_net_faults_take_the_sole_voters_id(one: Cluster) -> None:
    # Network faults name a single controller `controller` (as its brokers do); its id names it too.
    one.cli("net", "partition", "1", "1000")
    status = json.loads(one.cli("net", "status", "-o", "json").stdout)
    assert {(f["src"], f["dst"]) for f in status["faults"]} == {("1", "controller"), ("controller", "1")}
    one.cli("net", "heal", "1000")
    assert json.loads(one.cli("net", "status", "-o", "json").stdout)["faults"] == []
    recorded = [json.loads(line) for line in (one.root / "faults.jsonl").read_text().splitlines()]
    assert [(r["action"], r["nodes"]) for r in recorded[-2:]] == [
        ("partition", ["1", "controller"]),
        ("heal", ["controller"]),
    ]
