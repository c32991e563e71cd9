"""`isrsim chaos` on a real cluster (a quorum of 3 controllers + 3 brokers as processes): bad input refused
before anything is done; and (marker ``chaos``, `make chaos`, for their time: each brings up a cluster, runs
faults and then the report) a short run with every fault kind, on brokers and controllers, whose report
passes, whose chaos.json is the pure schedule byte for byte, and whose faults.jsonl holds every action of the
schedule, and the long run."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.cluster_files import ClusterInfo
from kit.fault_journal import read_faults
from kit.processes import process_state
from lab.chaos.schedule import FAULT_KINDS, Schedule, make_schedule
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import events, run_cli

pytestmark = pytest.mark.integration

# Requests that a fault swallowed time out after 2 s (followers, broker -> controller, controller -> broker).
CHAOS_SETTINGS = (
    *FAST,
    "replica.socket.timeout.ms=2000",
    "request.timeout.ms=2000",
    "controller.socket.timeout.ms=2000",
)
ALL = ",".join(FAULT_KINDS)
ENDS = {"kill": "restart", "term": "restart", "pause": "resume"}


VOTERS = [1000, 1001, 1002]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", settings=CHAOS_SETTINGS, controllers=len(VOTERS))


# An isolated active controller is replaced once its followers' fetch timeout (2 s) and an election timeout
# (1-2 s) have passed: a step that isolates it this long or longer sees the election.
ISOLATION_FOR_ELECTION_S = 5.0


def covering_seed(duration: float, interval: float) -> int:
    """The first seed whose schedule has every fault kind, kills, pauses and isolates a controller (long
    enough for the quorum to elect another leader meanwhile), and kills or stops a broker (a short run has
    room for all of it only with some seeds)."""

    def covers(sched: Schedule) -> bool:
        on_voters = {step.kind for step in sched.steps if step.controller}
        on_brokers = {step.kind for step in sched.steps if step.brokers}
        isolations = [s for s in sched.steps if s.kind == "isolate" and s.controller]
        return (
            all(sched.counts().values())
            and on_voters >= {"kill", "pause", "isolate"}
            and any(s.until_s - s.at_s >= ISOLATION_FOR_ELECTION_S for s in isolations)
            and bool(on_brokers & {"kill", "term"})
        )

    return next(
        s for s in range(1000) if covers(make_schedule(s, duration, interval, ALL, 1, [1, 2, 3], VOTERS))
    )


def assert_every_action_recorded(root: Path, schedule: Schedule, skipped: set[int] = frozenset()) -> None:
    """Each step's start (its kind) and its end (restart, resume or heal) are in faults.jsonl, in order;
    nothing of a ``skipped`` step."""
    records = read_faults(root)
    info = ClusterInfo.load(root)
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if "chaos_step" in r["params"]:
            by_step.setdefault(r["params"]["chaos_step"], []).append(r)
    for step in schedule.steps:
        got = by_step.get(step.index, [])
        if step.index in skipped:
            assert got == [], (step, got)
            continue
        actions = [r["action"] for r in got]
        assert actions == [step.kind, ENDS.get(step.kind, "heal")], (step, got)
        # On a quorum of several voters the schedule's "controller" is the voter that was the active
        # controller when the step started: the records name it by id. A sole voter is "controller" itself.
        voter = got[0]["params"].get("active_controller")
        several = info.several_voters and "controller" in step.nodes
        assert several == (voter is not None), (step, got)
        acted = [str(voter) if n == "controller" and voter is not None else n for n in step.nodes]
        assert voter is None or voter in [c.id for c in info.controllers]
        assert got[0]["nodes"] == acted, (step, got)
        assert got[0]["ts_ms"] <= got[1]["ts_ms"]
        if step.kind in ("partition", "delay", "loss", "isolate"):
            assert got[1]["nodes"] == acted  # the heal is of exactly this fault's links
    # Nothing was left for the final clean-up: every fault ended as planned.
    assert not [r for r in records if r["params"].get("chaos_final")]


def assert_isolated_voters_replaced(c: Cluster, schedule: Schedule) -> int:
    """Each isolation of the active controller was of a voter that led the quorum then, and when it lasted
    long enough, another voter was elected leader while it was cut off; returns how many were. The voter
    cut off learns of the new epoch after the heal (it follows the new leader)."""
    steps = {s.index: s for s in schedule.steps}
    records = [r for r in read_faults(c.root) if "chaos_step" in r["params"]]
    journals = {v.id: events(Path(v.journal), "quorum_state") for v in c.info.controllers}
    replaced = 0
    for start in [r for r in records if r["action"] == "isolate" and r["params"].get("controller")]:
        step = steps[start["params"]["chaos_step"]]
        heal = next(r for r in records if r["action"] == "heal" and r["params"]["chaos_step"] == step.index)
        voter = start["params"]["active_controller"]
        assert start["nodes"] == [str(voter)] and heal["nodes"] == [str(voter)]
        # It led when the step began: its last quorum_state before then says so.
        before = [e for e in journals[voter] if e["ts_ms"] <= start["ts_ms"]]
        assert before and before[-1]["role"] == "leader", (voter, before[-3:])
        elected = [
            (v, e)
            for v, evs in journals.items()
            if v != voter
            for e in evs
            if e["role"] == "leader" and start["ts_ms"] < e["ts_ms"] <= heal["ts_ms"]
        ]
        if heal["ts_ms"] - start["ts_ms"] >= ISOLATION_FOR_ELECTION_S * 1000:
            assert elected, (voter, step)
        if elected:
            replaced += 1
            # After the heal the isolated voter is a follower of a newer epoch.
            epoch = max(e["epoch"] for _, e in elected)
            assert any(
                e["ts_ms"] > heal["ts_ms"] and e["role"] == "follower" and e["epoch"] >= epoch
                for e in journals[voter]
            ), (voter, journals[voter][-5:])
    return replaced


def assert_one_clock(root: Path, out: str, run: dict[str, Any], report: dict[str, Any]) -> None:
    """Chaos prints its times on the report's clock: the same t0, each fault's line at the time
    faults.jsonl (and so the report) has for it; "in sync" is named apart from the report's "ISR full"."""
    t0 = report["t0_ms"]
    assert run["t0_ms"] == t0 and run["t0_source"] == report["t0_source"]
    assert "times are seconds since t0 = " in out
    printed = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+\.\d)s\s+(kill|term|pause|partition|isolate|delay|loss) (.+?) \(for ", line)
        if m:
            printed.setdefault(f"{m.group(2)} {m.group(3)}", float(m.group(1)))
    starts = {b["label"]: b["start_s"] for b in reversed(report["faults"]) if not b["instant"]}
    assert printed, out[-3000:]
    for label, at in printed.items():
        assert label in starts, (label, sorted(starts))
        assert abs(starts[label] - at) <= 0.5, (label, at, starts[label])
    assert "replicas in sync" in out and "ISR full" in out and "converged" not in out


def run_chaos(c: Cluster, *args: str, timeout: float) -> tuple[str, dict[str, Any]]:
    proc = run_cli("chaos", "--data-dir", str(c.root), *args, timeout=timeout, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"chaos exited with {proc.returncode}:\n{out[-6000:]}"
    run = json.loads((c.root / "chaos-run.json").read_text())
    return out, run


@pytest.mark.chaos  # 1-3 minutes (the cluster, 24 s of faults, the report): `make chaos`, not `make test`
@pytest.mark.timeout(900)
def test_short_chaos_run_with_every_fault_kind_passes_the_report(cluster: Cluster) -> None:
    duration, interval = 24.0, 2.0
    seed = covering_seed(duration, interval)
    schedule = make_schedule(seed, duration, interval, ALL, 1, [1, 2, 3], VOTERS)
    assert [c.id for c in cluster.info.controllers] == VOTERS
    dry = run_cli(
        "chaos", "--data-dir", str(cluster.root), "--seed", str(seed), "--duration", "24", "--interval", "2",
        "--dry-run",
    )  # fmt: skip
    assert dry.stdout == schedule.to_json()
    assert not (cluster.root / "chaos.json").exists()  # a dry run changes nothing

    t0 = time.monotonic()
    out, run = run_chaos(
        cluster,
        "--seed", str(seed), "--duration", "24", "--interval", "2", "--rate", "300", "--partitions", "3",
        timeout=600,  # the Spark report alone can take minutes on a busy 2-core machine
    )  # fmt: skip
    elapsed = time.monotonic() - t0

    assert (cluster.root / "chaos.json").read_text() == schedule.to_json()
    assert f"seed {seed}" in out and "isrsim report: VALID" in out
    report = json.loads((cluster.root / "report" / "report.json").read_text())
    assert report["verdict"] == "valid"
    assert run["report_exit_code"] == 0 and run["error"] is None
    # A step is skipped only when --max-down kept it waiting to its end: a broker of an earlier fault was
    # still fenced or out of an ISR (on a loaded machine a restarted broker may take that long to catch up).
    skipped = {s["index"]: s for s in run["skipped_steps"]}
    assert run["skipped"] == len(skipped)
    assert all(s["why"].startswith("--max-down 1: ") for s in skipped.values()), skipped
    kinds = {step.index: step.kind for step in schedule.steps}
    for kind, n in schedule.counts().items():
        assert run["injected"][kind] == n - sum(1 for i in skipped if kinds[i] == kind), (kind, run)
    assert len(skipped) <= 2 and sum(run["injected"].values()) >= 5, run
    assert run["records_acked"] > 0 and run["in_sync_after_last_fault_s"] is not None
    assert run["not_converged"] == []
    assert_every_action_recorded(cluster.root, schedule, set(skipped))
    # The report's first line states availability beside the verdict.
    first = next(line for line in out.splitlines() if line.startswith("isrsim report: "))
    assert "% of intended writes acknowledged" in first, first
    assert_one_clock(cluster.root, out, run, report)
    # Controllers were faulted too (never more than one of the three at once), and the report's quorum
    # checks pass.
    on_voters = [r for r in read_faults(cluster.root) if r["params"].get("controller")]
    assert {r["action"] for r in on_voters} >= {"kill", "pause", "restart", "resume", "isolate", "heal"}
    assert {r["nodes"][0] for r in on_voters} <= {str(v) for v in VOTERS}
    assert max(len(schedule.controllers_down_at(t / 10)) for t in range(240)) == 1
    assert_isolated_voters_replaced(cluster, schedule)
    passed = {c["name"] for c in report["checks"] if c["passed"]}
    assert {"one_leader_per_epoch", "metadata_log_matching", "no_stale_controller_obeyed"} <= passed
    # The command stopped the cluster it ran against.
    info = cluster.info
    assert all(process_state(p.pid) == "stopped" for p in [*info.brokers, *info.controllers])
    print(f"chaos run of {duration:g}s took {elapsed:.0f}s with the report; {run}")


def test_bad_input_is_refused_before_anything_is_done(cluster: Cluster) -> None:
    def fails(*args: str) -> str:
        proc = run_cli("chaos", "--data-dir", str(cluster.root), *args, check=False, timeout=30)
        assert proc.returncode == 2, proc
        return proc.stderr.strip().splitlines()[-1]

    assert "unknown fault kind 'nuke'" in fails("--faults", "kill,nuke")
    assert "--max-down 3 must be less than the number of brokers (3)" in fails("--max-down", "3")
    assert "--duration must be a positive number of seconds (got 0)" in fails("--duration", "0")
    assert not (cluster.root / "chaos.json").exists()
    assert read_faults(cluster.root) == []


@pytest.mark.chaos
@pytest.mark.timeout(1800)  # five minutes of faults, convergence and the report; the run itself gets 1500 s
def test_long_chaos_run(tmp_path: Path) -> None:
    """`make chaos`: five minutes of every fault kind on 3 brokers and 3 controllers, 6 partitions, RF 3,
    acks=all, min.insync.replicas=2; the report must pass (nothing acknowledged lost, no divergence,
    converged)."""
    for c in cluster_up(tmp_path / "root", settings=CHAOS_SETTINGS, controllers=len(VOTERS)):
        seed = 7
        schedule = make_schedule(seed, 300, 3, ALL, 1, [1, 2, 3], VOTERS)
        out, run = run_chaos(
            c, "--seed", str(seed), "--duration", "300", "--interval", "3", "--rate", "2000", timeout=1500
        )
        figures = {k: run[k] for k in ("injected", "records_acked", "batches_failed", "skipped_steps")}
        figures["in_sync_after_last_fault_s"] = run["in_sync_after_last_fault_s"]
        print(f"{out[-4000:]}\nchaos-run.json: {figures}")
        assert "isrsim report: VALID" in out
        assert (c.root / "chaos.json").read_text() == schedule.to_json()
        assert run["report_exit_code"] == 0 and run["not_converged"] == []
        assert all(run["injected"].values()), run
        # A step is skipped only when --max-down kept it waiting to its end; every other step is in
        # faults.jsonl, start and end. The network steps on the "controller" end act on the voter that is
        # the active controller at their start (its id in the records), isolations of it included.
        skipped = {s["index"]: s for s in run["skipped_steps"]}
        assert run["skipped"] == len(skipped) <= 5, skipped
        assert all(s["why"].startswith("--max-down 1: ") for s in skipped.values()), skipped
        assert_every_action_recorded(c.root, schedule, set(skipped))
        on_controller = [s for s in schedule.steps if "controller" in s.nodes and s.index not in skipped]
        assert {s.kind for s in on_controller} == {"partition", "isolate", "delay", "loss"}, on_controller
        assert assert_isolated_voters_replaced(c, schedule) >= 1
