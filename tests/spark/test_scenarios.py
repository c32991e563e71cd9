"""`isrsim scenario` on real clusters, judged by the report in the shared Spark session.

Each scenario is played once per session (with --no-report, as `play(..., report=False)`), then its data
directory is judged: under the default truncation mode every scenario's report passes; under the buggy
modes the KIP's damage is in the segment files and the report fails; the network-fault scenarios pass.
The last two groups, and the zombie-leader run, bring up six more clusters: marker ``scenarios`` (`make
scenarios`). One clean run's data is also cut, replica by replica, to check the report's rule for a clean
stop: every replica in the ISR when the stop began must hold the whole log."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from broker.config import KEYS_BY_NAME
from kit.cluster_files import ClusterInfo
from lab.scenarios import Outcome, play
from lab.scenarios.evidence import gather
from lab.scenarios.run import PARTITION, TOPIC
from protocol import decode_records, iter_batches
from spark_jobs import checks
from spark_jobs.inputs import load_inputs
from spark_jobs.layout import discover
from spark_jobs.report_job import EXIT_FAILED, EXIT_OK, ReportOutcome, run_report
from storage.checkpoint import OffsetCheckpointFile
from storage.log import Log, LogConfig

pytestmark = [pytest.mark.spark, pytest.mark.integration]

Player = Callable[[str, str], Outcome]
MODES_LANDED = "replication.truncation.mode" in KEYS_BY_NAME
needs_modes = pytest.mark.skipif(not MODES_LANDED, reason="replication.truncation.mode is not in this isrsim")


@pytest.fixture(scope="session")
def played(tmp_path_factory: pytest.TempPathFactory) -> Player:
    """Plays a scenario under a mode once per session; returns its outcome (its root holds the data)."""
    cache: dict[tuple[str, str], Outcome] = {}
    base = tmp_path_factory.mktemp("scenarios")

    def get(name: str, mode: str) -> Outcome:
        if (name, mode) not in cache:
            root = base / f"{name}-{mode}"
            with open(base / f"{name}-{mode}.txt", "w") as out:
                cache[(name, mode)] = play(name, mode, root, Console(file=out, width=160), report=False)
        return cache[(name, mode)]

    return get


def _report(spark: Any, root: Path, out: Path) -> ReportOutcome:
    with open(out.parent / f"{out.name}-console.txt", "w") as f:
        return run_report(spark, root, out, console=Console(file=f, width=160), max_plots=1)


def _failed(outcome: ReportOutcome) -> set[str]:
    return {c["name"] for c in outcome.report["checks"] if not c["passed"]}


@pytest.mark.parametrize(
    "name",
    [
        "kip-101-lost-write",
        # Kept for `make scenarios` (in CI after `make test`) to hold the default suite's time: the zombie
        # leader is covered end to end by tests/integration/test_cluster.py's zombie-leader test, and the
        # divergences run the same fix (truncation by leader epoch) as kip-101-lost-write above.
        pytest.param("kip-101-divergence", marks=pytest.mark.scenarios),
        pytest.param("kip-279-divergence", marks=pytest.mark.scenarios),
        pytest.param("zombie-leader", marks=pytest.mark.scenarios),
    ],
)
def test_every_scenario_passes_under_the_default_mode(
    spark: Any, played: Player, name: str, tmp_path: Path
) -> None:
    outcome = played(name, "leader-epoch")
    assert outcome.seen_outcome == "consistent" and outcome.as_expected
    assert outcome.root is not None
    report = _report(spark, outcome.root, tmp_path / "report")
    assert report.exit_code == EXIT_OK, _failed(report)
    # The scenario's one controller is a one-voter quorum (SPEC §11): the quorum's checks examine it.
    checks = {c["name"]: c for c in report.report["checks"]}
    for check in ("one_leader_per_epoch", "metadata_log_matching"):
        assert checks[check]["passed"] and checks[check]["checked"], checks[check]
    ev = gather(ClusterInfo.load(outcome.root), _replicas(outcome.root), TOPIC, PARTITION)
    assert ev.acked and not ev.lost_everywhere and not ev.missing_somewhere and not ev.diverged
    _converged_as_the_journals_say(report, outcome.root)
    if name in ("zombie-leader", "kip-279-divergence"):
        # One acks=1 batch is gone from every replica (the zombie's, truncated when it learnt the new epoch;
        # KIP-279's m3, written in an epoch the final leader never had): Kafka's acks=1 loss, listed by
        # the report, not failed.
        assert [a.acks for a in ev.acks1_lost] == [1]
        acked = next(c for c in report.report["checks"] if c["name"] == "acked_not_lost")
        assert acked["extra"]["acks1_lost"]


def _converged_as_the_journals_say(report: ReportOutcome, root: Path) -> None:
    """The report's time to converge after the last fault, checked against the controller's journal: the
    moment it gives is one at which the ISR was full, every ISR the controller set from then until the
    final stop is full, and (unless it is the fault's end) the ISR was short just before."""
    overall = report.report["time_to_converge"]["overall"]
    converged, last_end = overall["converged_ms"], overall["last_fault_end_ms"]
    assert converged is not None and last_end is not None and converged >= last_end
    # The scenario's one controller (a one-voter quorum, in controller-1000/).
    (journal,) = root.glob("controller*/events.jsonl")
    lines = [json.loads(line) for line in journal.open() if line.strip()]
    last_start = max(
        e["ts_ms"] for b in root.glob("broker-*") for e in _journal(b) if e["event"] == "broker_started"
    )
    stop = min(e["ts_ms"] for e in lines if e["event"] == "broker_shutting_down" and e["ts_ms"] > last_start)
    replicas = set(_replicas(root))
    isr = [
        (e["ts_ms"], set(e["isr"]))
        for e in lines
        if e.get("topic") == TOPIC and e.get("isr") is not None and e["ts_ms"] < stop
    ]
    assert all(s == replicas for ts, s in isr if ts >= converged), (converged, isr)
    if converged > last_end:
        before = [s for ts, s in isr if ts < converged]
        assert before and before[-1] != replicas
        assert converged in {ts for ts, s in isr if s == replicas}
    assert overall["time_to_converge_ms"] == converged - last_end


def _journal(broker_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in broker_dir.rglob("events.jsonl") for line in f.open() if line.strip()]


@pytest.mark.scenarios
def test_controller_failover_scenario_tells_its_story_and_the_report_passes(
    spark: Any, played: Player, tmp_path: Path
) -> None:
    """Three controllers: the active one killed and replaced, a broker failure handled by the new one, a
    paused old one refused with STALE_CONTROLLER_EPOCH (11) when it wakes; the report, with its quorum
    checks, is valid."""
    outcome = played("controller-failover", "leader-epoch")
    assert outcome.seen_outcome == "consistent" and outcome.as_expected
    assert outcome.root is not None
    root = outcome.root
    report = _report(spark, root, tmp_path / "report")
    assert report.exit_code == EXIT_OK, _failed(report)
    passed = {c["name"] for c in report.report["checks"] if c["passed"]}
    assert {"one_leader_per_epoch", "metadata_log_matching", "no_stale_controller_obeyed"} <= passed
    journals = {d.name: _journal(d) for d in root.glob("controller-*")}
    assert len(journals) == 3
    activations = sorted(
        (e["ts_ms"], name, e["controller_epoch"])
        for name, lines in journals.items()
        for e in lines
        if e["event"] == "controller_activated"
    )
    assert len({name for _, name, _ in activations}) >= 2  # a new active controller after the kill
    refused = [e for lines in journals.values() for e in lines if e["event"] == "stale_controller_epoch"]
    assert refused and all(e["error_code"] == 11 for e in refused)
    fenced = [e for lines in journals.values() for e in lines if e["event"] == "broker_fenced"]
    assert any(e["reason"] == "session_timeout" for e in fenced)  # the broker failure after the takeover
    faults = [json.loads(line) for line in (root / "faults.jsonl").open() if line.strip()]
    assert {f["action"] for f in faults if f["params"].get("controller")} >= {"kill", "pause", "resume"}


@pytest.mark.scenarios
@pytest.mark.parametrize("name", ["slow-follower", "isolated-leader"])
def test_network_fault_scenarios_pass_under_the_default_mode(
    spark: Any, played: Player, name: str, tmp_path: Path
) -> None:
    """The two stories that need `isrsim net`: the ISR shrinks and expands, or the isolated leader's lone
    batch is truncated, and nothing acknowledged is lost. The faults are in faults.jsonl for the report."""
    outcome = played(name, "leader-epoch")
    assert outcome.as_expected and outcome.seen_outcome == "consistent"
    assert outcome.root is not None
    assert (outcome.root / "faults.jsonl").read_text().count("heal") == 1
    report = _report(spark, outcome.root, tmp_path / "report")
    assert report.exit_code == EXIT_OK, _failed(report)
    kinds = {f["kind"] for f in report.report["checks"][0]["extra"]["faults"]}
    # The slow follower leaves the ISR (its leader's ALTER_PARTITION); the isolated leader is fenced and
    # replaced.
    assert kinds >= ({"isr_shrink"} if name == "slow-follower" else {"fenced", "leader_change"}), kinds


@pytest.mark.scenarios
def test_duplicates_scenario_only_the_plain_producer_writes_twice(
    spark: Any, played: Player, tmp_path: Path
) -> None:
    """Lost answers to clients: the producer without idempotence left records twice in the log, the
    idempotent one none; nothing acknowledged is lost and the report passes."""
    outcome = played("duplicates", "leader-epoch")
    assert outcome.as_expected and outcome.seen_outcome == "consistent"
    assert outcome.root is not None
    data = b"".join(p.read_bytes() for p in sorted(outcome.root.glob(f"broker-*/data/{TOPIC}-0/*.log")))
    copies: dict[bytes, int] = {}
    for pos, _ in iter_batches(data):
        for record in decode_records(data, pos)[1]:
            key = (record.value or b"").rsplit(b":", 1)[0]  # <id>-<workload>:<seq>
            copies[key] = copies.get(key, 0) + 1
    replicas = len(list(outcome.root.glob("broker-*")))
    twice = {k.split(b":")[0].rsplit(b"-", 1)[-1] for k, n in copies.items() if n > replicas}
    assert twice == {b"plain"}, twice
    report = _report(spark, outcome.root, tmp_path / "report")
    assert report.exit_code == EXIT_OK, _failed(report)


BUGGY = [
    ("kip-101-lost-write", "high-watermark", {"acked_not_lost", "log_matching"}),
    ("kip-101-divergence", "high-watermark", {"acked_not_lost", "log_matching"}),
    ("kip-279-divergence", "leader-epoch-pre-kip-279", {"log_matching"}),
]


@pytest.mark.scenarios
@needs_modes
@pytest.mark.parametrize(("name", "mode", "checks"), BUGGY)
def test_buggy_mode_damages_the_logs_and_the_report_fails(
    spark: Any, played: Player, name: str, mode: str, checks: set[str], tmp_path: Path
) -> None:
    outcome = played(name, mode)
    assert outcome.as_expected, outcome
    assert outcome.root is not None
    # The damage is in the segment files: an acknowledged batch on no replica, or two replicas holding
    # different batches at one offset below every HW.
    ev = gather(ClusterInfo.load(outcome.root), _replicas(outcome.root), TOPIC, PARTITION)
    assert ev.lost_everywhere or ev.diverged
    report = _report(spark, outcome.root, tmp_path / "report")
    assert report.exit_code == EXIT_FAILED
    assert _failed(report) & checks


# ---------------------------------------------------------------------------------------------- clean stop


def _replicas(root: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in root.glob("broker-*"))


def _cut_tail(root: Path, broker: int, records: int) -> int:
    """Cuts the last ``records`` offsets off ``broker``'s replica (whole batches), checkpoints included."""
    data = root / f"broker-{broker}" / "data"
    log = Log.open(data / f"{TOPIC}-{PARTITION}", TOPIC, PARTITION, LogConfig())
    end = log.log_end_offset - records
    log.truncate_to(end)
    end = log.log_end_offset
    log.close()
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
        f = OffsetCheckpointFile(data / name)
        entries = f.read()
        entries[(TOPIC, PARTITION)] = min(end, entries.get((TOPIC, PARTITION), end))
        f.write(entries)
    return end


@pytest.mark.parametrize("broker", [1, 2, 3])
def test_a_replica_of_the_isr_before_a_clean_stop_missing_its_tail_fails(
    spark: Any, played: Player, broker: int, tmp_path: Path
) -> None:
    """After `cluster down` the final ISR is one broker; every replica in the ISR before the stop is still
    judged: whichever loses its last batch, convergence and acked_not_lost fail."""
    outcome = played("zombie-leader", "leader-epoch")
    assert outcome.root is not None
    root = tmp_path / f"cut-{broker}"
    shutil.copytree(outcome.root, root, ignore=shutil.ignore_patterns("report"))
    end = _cut_tail(root, broker, 10)
    # The two checks the rule lives in (the whole report is run on the uncut data above).
    inp = load_inputs(spark, discover(root))
    conv, acked = checks.check_convergence(inp), checks.check_acked(inp)
    assert not conv.passed and not acked.passed
    problems = {(r["problem"], r["detail"]) for r in conv.examples}
    assert any("ISR before the final stop" in p for p, _ in problems), problems
    lost = {(r["broker"], r["base_offset"], r["problem"]) for r in acked.examples}
    assert (broker, end, "missing") in lost


@pytest.mark.scenarios
@pytest.mark.parametrize("verification", [True, False], ids=["verification", "legacy"])
def test_hanging_transaction_scenario(spark: Any, tmp_path: Path, verification: bool) -> None:
    """KIP-890: a late transactional write after an abort. Verified by the coordinator it is refused
    (INVALID_TXN_STATE) and the report passes; in the legacy mode it opens a transaction that never ends,
    and no_hanging_transactions fails, naming the partition and the producer."""
    root = tmp_path / "hanging"
    with open(tmp_path / "scenario.txt", "w") as out:
        outcome = play(
            "hanging-transaction",
            "leader-epoch",
            root,
            Console(file=out, width=160),
            report=False,
            verification=verification,
        )
    assert outcome.seen_outcome == "consistent"
    report = _report(spark, root, tmp_path / "report")
    checks_by_name = {c["name"]: c for c in report.report["checks"]}
    atomic = checks_by_name["transactions_atomic"]
    assert atomic["passed"] and atomic["checked"] == 2  # the committed and the aborted transaction
    hanging = checks_by_name["no_hanging_transactions"]
    if verification:
        assert report.exit_code == EXIT_OK, _failed(report)
        assert hanging["passed"] and hanging["checked"] == 1
        return
    assert report.exit_code == EXIT_FAILED and _failed(report) == {"no_hanging_transactions"}
    [example] = hanging["examples"]
    assert (example["topic"], example["partition"], example["first_offset"]) == (TOPIC, PARTITION, 12)
    assert example["producer_id"] >= 0 and f"producer {example['producer_id']}" in example["problem"]
