"""The report job on clusters made for real (a broker process killed and restarted, its data copied to
make replicas) and on copies damaged on purpose, one damage per partition."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from cli.report_cmd import report as report_command
from spark_jobs.availability import CAUSES
from spark_jobs.layout import discover
from spark_jobs.report_job import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_UNREADABLE,
    ReportOutcome,
    run_report,
)
from spark_jobs.sources import pack_segments
from tests.spark.cluster_fixtures import (
    PER_PARTITION,
    damage,
    make_unreadable,
    read_events,
    truncate,
)
from tests.spark.conftest import CleanReport

pytestmark = pytest.mark.spark


def _run(spark: Any, root: Path, tmp_path: Path) -> ReportOutcome:
    console = Console(file=(tmp_path / "console.txt").open("w"), width=160)
    return run_report(spark, root, tmp_path / "report", console=console, max_plots=3)


def _check(outcome: ReportOutcome, name: str) -> dict[str, Any]:
    return next(c for c in outcome.report["checks"] if c["name"] == name)


def _partitions(check: dict[str, Any]) -> set[int]:
    return {row["partition"] for row in check["examples"]}


@pytest.fixture(scope="module")
def clean_run(clean_report: CleanReport) -> Any:
    """The session's report of the three replicas with kill -9 leftovers (tests/spark/conftest.py)."""
    return clean_report.outcome, clean_report.leftovers, clean_report.out


@pytest.fixture(scope="module")
def damaged_run(spark: Any, three_replica_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("damaged") / "cluster"
    shutil.copytree(three_replica_root, root)
    facts = damage(root)
    return _run(spark, root, tmp_path_factory.mktemp("damaged-report")), facts


# ---------------------------------------------------------------------------------------------- clean


def test_clean_run_passes_every_check(clean_run: Any) -> None:
    outcome, _, _ = clean_run
    failed = [(c["name"], c["examples"][:2]) for c in outcome.report["checks"] if not c["passed"]]
    assert failed == []
    assert outcome.exit_code == EXIT_OK
    assert outcome.report["verdict"] == "valid"
    assert outcome.report["schema_version"] == 2
    assert {c["name"]: c["verdict"] for c in outcome.report["checks"]} == dict.fromkeys(
        [c["name"] for c in outcome.report["checks"]], "valid"
    )
    assert [c["name"] for c in outcome.report["checks"]] == [
        "convergence",
        "log_matching",
        "acked_not_lost",
        "offsets_contiguous",
        "leader_hw_monotonic",
        "epoch_cache",
        "unclean_elections",
        "one_leader_per_epoch",
        "metadata_log_matching",
        "no_stale_controller_obeyed",
        "batches_intact",
        "no_duplicates",
        "committed_offsets_not_lost",
        "committed_offsets_below_hw",
        "compaction_kept_latest",
        "transactions_atomic",
        "read_committed_isolated",
        "no_hanging_transactions",
        "consumer_no_skip",
        "consumer_redelivery",
    ]
    acked = _check(outcome, "acked_not_lost")
    assert acked["checked"] == 80  # each batch once, though the leader and the workload both journaled it
    assert "(80 journaled by their leaders (acked.jsonl), 80 by the workload" in acked["notes"][0]
    assert outcome.report["inputs"]["broker_acked_lines"] == 80
    assert _check(outcome, "no_duplicates")["checked"] == outcome.report["inputs"]["batches"]
    # Availability: the two producer runs' counts (attempts-*.jsonl), every record acknowledged. A stall
    # (a batch waiting a second or more on a loaded machine) would have a cause from the list.
    a = outcome.report["availability"]
    assert (a["intended"], a["acknowledged"], a["failed"], a["unknown"]) == (16_000, 16_000, 0, 0)
    assert a["acknowledged_ratio"] == 1.0 and a["counted_by"] == "workload"
    assert all(st["cause"] in CAUSES for st in a["stalls"])
    assert a["longest_stall_s"] == max((st["seconds"] for st in a["stalls"]), default=0.0)
    console = (outcome.out_dir.parent / "console.txt").read_text().splitlines()
    first = next(line for line in console if line.startswith("isrsim report:"))
    assert first.startswith("isrsim report: VALID  (20 valid); 100 % of intended writes acknowledged; ")
    assert "; longest stall " in first and first.endswith(" s"), first


def test_clean_run_reads_every_segment_and_tolerates_kill9_leftovers(clean_run: Any) -> None:
    outcome, leftovers, _ = clean_run
    inputs = outcome.report["inputs"]
    layout = discover(outcome.report["data_dir"])
    assert inputs["segment_bytes"] == layout.segment_bytes
    assert inputs["segment_files"] == len(layout.segments)
    assert inputs["batches"] == 3 * 80
    assert inputs["read_mb_per_s"] > 0
    assert inputs["brokers"] == [1, 2, 3]
    assert inputs["torn_tail_bytes"] == leftovers["torn_bytes"]
    assert inputs["torn_journal_lines"] == 1
    assert any(leftovers["torn_segment"] in n for n in inputs["notes"])
    assert any(leftovers["torn_journal"] in n for n in inputs["notes"])


def test_clean_run_final_state_and_convergence_time(clean_run: Any) -> None:
    outcome, _, _ = clean_run
    conv = _check(outcome, "convergence")
    parts = conv["extra"]["partitions"]
    assert len(parts) == 8
    assert {(p["leader"], tuple(p["isr"])) for p in parts} == {(1, (1, 2, 3))}
    assert all(p["replicas"] == [{"broker": b, "leo": 2000, "hw": 2000} for b in (1, 2, 3)] for p in parts), (
        parts[0]["replicas"]
    )
    # The SIGKILL and the restart of broker 1 (seen in its journal only) are the last fault. The restarted
    # broker journals ISR [1] (it ran alone); the controller's journal then says [1, 2, 3]: converged.
    root = Path(outcome.report["data_dir"])
    b1 = read_events(root / "broker-1" / "data" / "events.jsonl")
    restart = [e["ts_ms"] for e in b1 if e["event"] == "broker_started"][1]
    down = max(e["ts_ms"] for e in b1 if e["ts_ms"] < restart)
    elected = min(e["ts_ms"] for e in read_events(root / "controller" / "events.jsonl") if e.get("isr"))
    windows = [w for w in outcome.report["fault_windows"] if w["source"] == "journal"]
    assert [(w["label"], w["start_s"], w["end_s"]) for w in windows] == [
        ("crash 1", (down - outcome.report["t0_ms"]) / 1000, (restart - outcome.report["t0_ms"]) / 1000)
    ]
    for row in conv["extra"]["time_to_converge"]:
        assert row["last_fault"] == "crash 1" and row["replicas"] == [1, 2, 3]
        assert row["converged_ts"] == max(elected, restart)
        assert row["time_to_converge_ms"] == max(elected, restart) - restart


def test_clean_run_writes_json_html_and_timelines(clean_run: Any) -> None:
    outcome, _, _ = clean_run
    data = json.loads((outcome.out_dir / "report.json").read_text())
    assert data["verdict"] == "valid"
    assert {c["name"]: c["violations"] for c in data["checks"]} == dict.fromkeys(
        [c["name"] for c in data["checks"]], 0
    )
    page = (outcome.out_dir / "report.html").read_text()
    assert page.index("VALID") < page.index("Replicas converged")
    assert page.count("data:image/png;base64,") == 1 + 3  # the overview, and a lag plot per partition
    console = (outcome.out_dir.parent / "console.txt").read_text()
    assert "bytes of segments" in console and "MB/s" in console


def test_unknown_where_nothing_could_be_checked(
    spark: Any, single_broker_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to look at is not a pass (Jepsen's "unknown"), with its own exit code: one replica per
    partition leaves log_matching no second log, and with the acknowledgement journals deleted (the
    workload's and the broker's acked.jsonl) acked_not_lost has no batch to look for. Run as `isrsim report`
    with its output in a log at 80 columns; no check fails."""
    root = tmp_path / "cluster"
    shutil.copytree(
        single_broker_root, root, ignore=shutil.ignore_patterns("report", "workload", "acked.jsonl")
    )
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "report"
    result = CliRunner().invoke(
        report_command, ["--data-dir", str(root), "--out", str(out), "--max-plots", "1"]
    )
    assert result.exit_code == EXIT_UNKNOWN, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "unknown" and report["schema_version"] == 2
    unknown = {c["name"]: c["checked"] for c in report["checks"] if c["verdict"] == "unknown"}
    assert unknown == {"log_matching": 0, "acked_not_lost": 0}
    assert report["verdict_counts"] == {"valid": 18, "invalid": 0, "unknown": 2}
    assert all(c["passed"] for c in report["checks"])
    checks = {c["name"]: c for c in report["checks"]}
    assert report["inputs"]["max_replicas_per_partition"] == 1
    assert any("single replica" in n for n in checks["log_matching"]["notes"])
    # The restart after SIGKILL starts a new leader tenure: HW restarting from the checkpoint is no violation.
    assert checks["leader_hw_monotonic"]["verdict"] == "valid"
    # No controller journal: the elections are the broker's own became_leader events, every one clean.
    assert checks["unclean_elections"]["verdict"] == "valid" and checks["unclean_elections"]["checked"] >= 8
    assert "no controller journal" in checks["unclean_elections"]["notes"][0]
    faults = checks["convergence"]["extra"]["faults"]
    assert [(f["kind"], f["broker"]) for f in faults if f["kind"] == "crash"] == [("crash", 1)]
    assert sorted(f["partition"] for f in faults if f["kind"] == "leader_change") == list(range(8))
    # The summary: its verdict first, whole on one line (SPEC 12: verdict, acknowledged ratio, longest
    # stall; never wrapped), each check on its own line, no other line past 80 columns, no Spark lines.
    lines = result.output.splitlines()
    verdict_line = next(line for line in lines if line.startswith("isrsim report: UNKNOWN"))
    assert "; acknowledged ratio unknown" in verdict_line and "; longest stall 0.0 s" in verdict_line
    for name in unknown:
        assert "nothing to examine" in next(line for line in lines if f" {name} " in line)
    assert max(len(line) for line in lines if line != verdict_line) <= 80
    assert "log4j" not in result.output and "WARN" not in result.output


# ---------------------------------------------------------------------------------------------- damaged


def test_damaged_run_fails_with_exit_code_1(damaged_run: Any) -> None:
    outcome, _ = damaged_run
    assert outcome.exit_code == EXIT_FAILED
    assert outcome.report["verdict"] == "invalid"
    # Every check but the quorum's (this cluster has one controller; tests/spark/test_quorum_checks.py
    # damages those) and no_duplicates (the damage writes no batch twice) fails on its own damage.
    quorum = {"one_leader_per_epoch", "metadata_log_matching", "no_stale_controller_obeyed"}
    # Nor do the committed-offsets checks: no consumer group ran (test_group_checks.py damages those).
    groups = {"committed_offsets_not_lost", "committed_offsets_below_hw"}
    # Nor those of inputs this run did not have: a compacted topic, transactions, consumer groups (their own
    # tests damage those).
    absent = {
        "compaction_kept_latest",
        "transactions_atomic",
        "read_committed_isolated",
        "no_hanging_transactions",
        "consumer_no_skip",
        "consumer_redelivery",
    }
    damaged = [
        c for c in outcome.report["checks"] if c["name"] not in {*quorum, *groups, *absent, "no_duplicates"}
    ]
    assert {c["verdict"] for c in damaged} == {"invalid"}
    assert all(not c["passed"] for c in damaged)
    assert {c["verdict"] for c in outcome.report["checks"] if c["name"] in quorum} == {"valid"}
    assert "INVALID" in (outcome.out_dir / "report.html").read_text()


def test_convergence_fails_on_hw_above_leo(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "convergence")
    assert _partitions(check) == {3}
    problems = {(r["broker"], r["problem"]) for r in check["examples"]}
    assert (2, "HW above LEO at the end") in problems
    assert (None, "live ISR replicas disagree on LEO/HW") in problems
    above = next(r for r in check["examples"] if r["broker"] == 2)
    assert above["detail"] == f"HW {PER_PARTITION + 500} (checkpoint) > LEO {PER_PARTITION}"


def test_log_matching_lists_the_diverged_replica_and_the_gap(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "log_matching")
    assert _partitions(check) == {0, 2}
    diverged = [r for r in check["examples"] if r["partition"] == 0]
    assert [r["base_offset"] for r in diverged] == [1000, 1200, 1400, 1600, 1800]
    first = diverged[0]
    assert "broker 1: 1000-1199 epoch 0" in first["detail"]
    assert "broker 2: 1000-1199 epoch 1" in first["detail"]
    assert "broker 3: 1000-1199 epoch 0" in first["detail"]
    assert first["smallest_hw"] == PER_PARTITION
    gap = [r for r in check["examples"] if r["partition"] == 2]
    assert [(r["base_offset"], r["missing_on"]) for r in gap] == [(600, [3])]
    # Per-record evidence for the first divergences: broker 2 holds other records at offset 1000.
    records = {(r["broker"], r["offset"]): r["value"] for r in check["extra"]["first_records"]}
    assert records[(2, 1000)] == "diverged"
    assert records[(1, 1000)] != "diverged"


def test_acked_check_lists_every_lost_acknowledged_batch(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "acked_not_lost")
    rows = check["examples"]
    assert check["violations"] == 5 + 6 + 1 + 2
    assert _partitions(check) == {0, 1, 2, 7}
    lost = sorted((r["base_offset"], r["broker"], r["problem"]) for r in rows if r["partition"] == 1)
    assert lost == [(b, k, "missing") for b in (1600, 1800) for k in (1, 2, 3)]
    replaced = {(r["base_offset"], r["broker"]) for r in rows if r["partition"] == 0}
    assert replaced == {(b, 2) for b in (1000, 1200, 1400, 1600, 1800)}
    assert all("CRC differs" in r["problem"] for r in rows if r["partition"] == 0)
    assert {(r["base_offset"], r["broker"]) for r in rows if r["partition"] == 2} == {(600, 3)}
    # After the unclean election only broker 2 is in t-7's ISR, and it never had 1600-1999.
    assert {(r["base_offset"], r["broker"], r["role"]) for r in rows if r["partition"] == 7} == {
        (1600, 2, "leader"),
        (1800, 2, "leader"),
    }
    assert all(r["acks"] == -1 for r in rows)


def test_contiguity_fails_on_the_gap_only(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "offsets_contiguous")
    assert check["violations"] == 1
    row = check["examples"][0]
    assert (row["broker"], row["partition"], row["problem"]) == (3, 2, "gap")
    assert (row["expected_offset"], row["base_offset"], row["missing_records"]) == (600, 800, 200)


def test_leader_hw_fails_on_the_backwards_leader_hw(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "leader_hw_monotonic")
    assert check["violations"] == 1
    row = check["examples"][0]
    assert (row["broker"], row["partition"], row["leader_epoch"]) == (1, 4, 0)
    assert (row["prev_hw"], row["hw"]) == (PER_PARTITION, 1200)


def test_epoch_cache_fails_on_the_inconsistent_cache(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "epoch_cache")
    assert {(r["broker"], r["partition"]) for r in check["examples"]} == {(3, 5)}
    assert check["violations"] == 6
    problems = [(r["problem"], r["offset"], r["batch_epoch"], r["cache_epoch"]) for r in check["examples"]]
    assert ("epochs not increasing", 1400, None, 2) in problems
    mismatches = [p for p in problems if p[0].startswith("batch epoch differs")]
    expected = [(1000, 0, 3), (1200, 0, 3), (1400, 0, 2), (1600, 0, 2), (1800, 0, 2)]
    assert [(o, b, c) for _, o, b, c in mismatches] == expected


def test_unclean_election_is_listed_with_its_cost(damaged_run: Any) -> None:
    outcome, facts = damaged_run
    check = _check(outcome, "unclean_elections")
    assert check["violations"] == 1
    row = check["examples"][0]
    assert (row["partition"], row["leader"], row["epoch"], row["elected_ts"]) == (
        7,
        2,
        1,
        facts["elected_ts"],
    )
    assert (row["leader_start"], row["others_leo"], row["records_lost"]) == (1600, PER_PARTITION, 400)
    assert row["acked_batches_lost"] == 2


def test_batches_intact_fails_on_the_flipped_byte_only(damaged_run: Any) -> None:
    check = _check(damaged_run[0], "batches_intact")
    assert [(r["broker"], r["partition"], r["base_offset"]) for r in check["examples"]] == [(3, 6, 400)]


# ---------------------------------------------------------------------------------------------- unreadable


def test_unreadable_input_exits_2_naming_the_files(spark: Any, cluster_copy: Path, tmp_path: Path) -> None:
    bad = make_unreadable(cluster_copy)
    outcome = _run(spark, cluster_copy, tmp_path)
    assert outcome.exit_code == EXIT_UNREADABLE
    paths = {p.path: p.problem for p in outcome.problems}
    assert set(paths) == {bad["foreign"], bad["checkpoint"]}
    assert paths[bad["foreign"]].startswith("foreign: not a v2 record batch log")
    assert "t 0 abc" in paths[bad["checkpoint"]] or "abc" in paths[bad["checkpoint"]]
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert written["verdict"] == "unreadable"
    assert len(written["input_problems"]) == 2


def test_cli_reports_a_directory_that_is_not_a_cluster(cluster_copy: Path, tmp_path: Path) -> None:
    (cluster_copy / "broker-4").mkdir()
    result = CliRunner().invoke(
        report_command,
        ["--data-dir", str(cluster_copy), "--out", str(tmp_path / "out")],
        catch_exceptions=False,
    )
    assert result.exit_code == EXIT_UNREADABLE
    assert "broker-4" in result.output and "meta.properties" in result.output


def test_pack_segments_groups_small_files_and_keeps_big_ones_alone(three_replica_root: Path) -> None:
    segments = discover(three_replica_root).segments
    groups = pack_segments(segments, max_bytes=64 << 20, open_cost=1 << 20, min_partitions=2)
    assert len(segments) == 72 and len(groups) == 2  # 72 x (~70 KB + 1 MiB) fits in two 64 MiB tasks
    assert max(len(g) for g in groups) - min(len(g) for g in groups) <= 1
    assert sorted(s.path for g in groups for s in g) == sorted(s.path for s in segments)
    alone = pack_segments(segments, max_bytes=1, open_cost=0, min_partitions=1)
    assert len(alone) == len(segments)


def test_acks1_losses_are_listed_but_only_acks_all_losses_fail(
    spark: Any, cluster_copy: Path, tmp_path: Path
) -> None:
    """A batch acknowledged with acks=1 and then gone from every replica (a crashed or zombie leader that
    acknowledged it alone) is Kafka's documented acks=1 loss: listed, not a violation. With acks=all it is.
    One report judges both: t-3 loses its last batch acknowledged with acks=1, t-5 its last with acks=all."""
    root = cluster_copy
    journals = {
        p: [json.loads(line) for line in p.read_text().splitlines()]
        for p in (root / "workload").glob("acked-*.jsonl")
    }
    # The leader's acked.jsonl says the same of the batch (it is the same acknowledgement).
    leader_path = root / "broker-1" / "data" / "acked.jsonl"
    leader_lines = [json.loads(line) for line in leader_path.open()]
    lost = {}
    for partition, acks in ((3, 1), (5, -1)):
        _, last = max(
            ((p, a) for p, lines in journals.items() for a in lines if a["partition"] == partition),
            key=lambda x: x[1]["base_offset"],
        )
        for broker in (1, 2, 3):
            truncate(root, broker, partition, last["base_offset"])
        last["acks"] = acks
        for line in leader_lines:
            if (line["partition"], line["base_offset"]) == (partition, last["base_offset"]):
                line["acks"] = acks
        lost[partition] = last["base_offset"]
    for path, lines in journals.items():
        path.write_text("".join(json.dumps(a) + "\n" for a in lines))
    leader_path.write_text("".join(json.dumps(a) + "\n" for a in leader_lines))

    check = _check(_run(spark, root, tmp_path), "acked_not_lost")
    # The acks=1 loss of t-3 is listed for every replica, and is no violation.
    listed = {
        (r["partition"], r["base_offset"], r["broker"], r["acks"]) for r in check["extra"]["acks1_lost"]
    }
    assert listed == {(3, lost[3], b, 1) for b in (1, 2, 3)}
    assert any("acks=1" in n for n in check["notes"])
    # The acks=all loss of t-5 is the only violation: missing on each of the three replicas.
    assert not check["passed"] and check["violations"] == 3
    assert {(r["partition"], r["base_offset"]) for r in check["examples"]} == {(5, lost[5])}
    assert all(r["acks"] == -1 for r in check["examples"])
