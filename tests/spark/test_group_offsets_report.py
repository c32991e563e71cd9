"""The report on a real run of a consumer group whose coordinator fails over (docs/groups.md, docs/report.md):
`isrsim consume --group` commits as it reads, the coordinator's broker is killed with SIGKILL, the group
carries on with the new coordinator, the killed broker comes back and catches up, `cluster down`. The
committed-offsets checks examine every commit and pass; the same data with the last commit's batch cut
from a replica that must hold it fails."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from kit.cluster_files import ClusterInfo
from protocol.api_keys import ApiKeys
from protocol.group_records import partition_for_group
from spark_jobs import group_checks
from spark_jobs.inputs import load_inputs
from spark_jobs.layout import discover
from spark_jobs.report_job import EXIT_OK, ReportOutcome, run_report
from storage.log import Log, LogConfig
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import events, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]

GROUP = "report-group"
OFFSETS = "__consumer_offsets"


def _report(spark: Any, root: Path, out: Path) -> ReportOutcome:
    with open(out.parent / f"{out.name}-console.txt", "w") as f:
        return run_report(spark, root, out, console=Console(file=f, width=160), max_plots=1)


def _check(outcome: ReportOutcome, name: str) -> dict[str, Any]:
    return next(c for c in outcome.report["checks"] if c["name"] == name)


@pytest.fixture(scope="module")
def failover_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("group-failover") / "cluster"
    settings = (*FAST, "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0")
    for cluster in cluster_up(root, settings=settings):
        run_group_through_a_failover(cluster)
        cluster.cli("cluster", "down", timeout=120)
        yield root


def run_group_through_a_failover(cluster: Cluster) -> None:
    cluster.cli("topic", "create", "t", "--partitions", "2", "--replication-factor", "3")

    def consume(count: int) -> list[str]:
        out = cluster.cli("consume", "t", "--group", GROUP, "--from-beginning", "--max-messages", str(count))
        return out.stdout.split()

    def coordinator() -> int | None:
        for b in cluster.info.brokers:
            try:
                resp = cluster.ask(b.id, ApiKeys.FIND_COORDINATOR, {"key": GROUP})
            except Exception:
                continue
            if resp["error_code"] == 0:
                return int(resp["node_id"])
        return None

    cluster.cli("produce", "t", "--count", "60", "--no-progress")
    assert len(consume(30)) == 30
    first = wait_until(coordinator, timeout=30, message="the group's coordinator")
    assert partition_for_group(GROUP, 1) == 0
    wait_until(lambda: cluster.isr_full(OFFSETS), timeout=30, message="__consumer_offsets in sync")

    cluster.cli("broker", "kill", str(first), "--signal", "KILL")
    wait_until(
        lambda: (c := coordinator()) is not None and c != first, timeout=30, message="a new coordinator"
    )
    # The group resumes at what it committed with the first coordinator, and commits with the new one.
    assert len(consume(30)) == 30
    cluster.cli("produce", "t", "--count", "20", "--no-progress")
    assert len(consume(20)) == 20
    cluster.cli("broker", "restart", str(first))
    wait_until(lambda: cluster.isr_full(OFFSETS), timeout=60, message="the restarted broker back in sync")
    wait_until(lambda: cluster.isr_full("t"), timeout=60, message="t back in sync")


def test_committed_offsets_survive_a_coordinator_failover(
    spark: Any, failover_root: Path, tmp_path: Path
) -> None:
    info = ClusterInfo.load(failover_root)
    commits = [
        e
        for b in info.brokers
        for e in events(Path(b.journal), "offsets_committed")
        if e["group_id"] == GROUP
    ]
    assert len({e["broker_id"] for e in commits}) == 2  # committed with both coordinators
    outcome = _report(spark, failover_root, tmp_path / "report")
    failed = [(c["name"], c["examples"][:2]) for c in outcome.report["checks"] if not c["passed"]]
    assert failed == []
    assert outcome.exit_code == EXIT_OK and outcome.report["verdict"] == "valid"
    lost = _check(outcome, "committed_offsets_not_lost")
    below = _check(outcome, "committed_offsets_below_hw")
    n = sum(len(e["offsets"]) for e in commits)
    assert (lost["verdict"], lost["checked"]) == ("valid", n)
    assert (below["verdict"], below["checked"]) == ("valid", n)


def test_a_commit_cut_from_a_replica_fails(spark: Any, failover_root: Path, tmp_path: Path) -> None:
    """The last acknowledged commit's batch cut from the log of a follower that must hold it (a broker
    other than the coordinator that acknowledged it): committed_offsets_not_lost fails on that broker. Only
    the check runs on the data (no whole report: the run above showed the report's wiring)."""
    root = tmp_path / "cluster"
    shutil.copytree(failover_root, root, ignore=shutil.ignore_patterns("report"))
    info = ClusterInfo.load(root)
    commits = sorted(
        (e for b in info.brokers for e in events(Path(b.journal), "offsets_committed")),
        key=lambda e: e["base_offset"],
    )
    last = commits[-1]
    victim = next(b for b in info.brokers if b.id != last["broker_id"])
    # cluster.json names the original's directories: the copy's are found under its own root.
    data = root / Path(victim.data_dir).relative_to(failover_root)
    log = Log.open(data / f"{OFFSETS}-0", OFFSETS, 0, LogConfig())
    try:
        log.truncate_to(last["base_offset"])
    finally:
        log.close()
    lost = group_checks.check_committed_offsets_not_lost(load_inputs(spark, discover(root)))
    assert lost.verdict == "invalid"
    assert {(x["broker"], x["base_offset"], x["problem"]) for x in lost.examples} == {
        (victim.id, last["base_offset"], "missing")
    }


def test_the_consumer_checks_judge_every_commit_of_the_group(
    spark: Any, failover_root: Path, tmp_path: Path
) -> None:
    """`isrsim consume --group` commits only what it read: no skip, through the coordinator's SIGKILL; each
    later run of it rejoins the group (a rebalance window per generation after the first)."""
    outcome = _report(spark, failover_root, tmp_path / "report")
    skip = _check(outcome, "consumer_no_skip")
    again = _check(outcome, "consumer_redelivery")
    assert skip["verdict"] == "valid" and skip["checked"], skip
    assert again["verdict"] == "valid" and again["checked"] >= 80, again
    (group,) = [g for g in again["extra"]["groups"] if g["group"] == GROUP]
    assert group["distinct_offsets"] == 80
    windows = [w for w in again["extra"]["rebalance_windows"] if w["group"] == GROUP]
    assert windows and all(w["end_ts"] is not None for w in windows), windows
