"""``isrsim scenario``: Kafka's replication stories (KIP-101, KIP-279, zombie, slow and isolated leaders,
duplicates, a controller failover) played on a fresh local cluster, each step waiting on journal events
or replica state.

``SCENARIOS`` names them; ``play`` runs one and says whether what was seen is what the truncation mode is
expected to show. See docs/scenarios.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.scenarios.base import DEFAULT_MODE, MODES, OUTCOMES, Expectation, Scenario
from lab.scenarios.evidence import Evidence, gather, interesting_offsets, side_by_side
from lab.scenarios.faults import Duplicates, IsolatedLeader, SlowFollower, ZombieLeader
from lab.scenarios.kips import Kip101Divergence, Kip101LostWrite, Kip279Divergence
from lab.scenarios.quorum import ControllerFailover
from lab.scenarios.run import PARTITION, TOPIC, ScenarioError, ScenarioRun
from lab.scenarios.transactions import VERIFICATION_KEY, HangingTransaction

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Kip101LostWrite(),
        Kip101Divergence(),
        Kip279Divergence(),
        ZombieLeader(),
        SlowFollower(),
        IsolatedLeader(),
        Duplicates(),
        ControllerFailover(),
        HangingTransaction(),
    )
}

__all__ = ["DEFAULT_MODE", "MODES", "SCENARIOS", "Outcome", "net_available", "play"]


@dataclass
class Outcome:
    scenario: str
    mode: str
    expected: Expectation
    seen_outcome: str
    report_verdict: str | None  # "valid", "invalid", "unknown", "unreadable", or None (--no-report)
    failed_checks: list[str] = field(default_factory=list)
    root: Path | None = None

    @property
    def as_expected(self) -> bool:
        if self.seen_outcome != self.expected.outcome:
            return False
        if self.report_verdict is None:
            return True
        if self.expected.report_passes:
            return self.report_verdict == "valid"
        return self.report_verdict == "invalid" and any(
            c in self.failed_checks for c in self.expected.failing_checks
        )


def net_available() -> bool:
    """Whether this isrsim has the network fault commands (`isrsim net`, in ``kit.net_faults``)."""
    import importlib.util

    return importlib.util.find_spec("kit.net_faults") is not None


def play(
    name: str,
    mode: str,
    root: Path,
    console: Console,
    *,
    report: bool = True,
    verification: bool = True,
) -> Outcome:
    """``verification``: the brokers' ``transaction.partition.verification.enable`` (false: the legacy mode
    before KIP-890)."""
    scenario = SCENARIOS[name]
    if scenario.needs_net and not net_available():
        raise ScenarioError(f"scenario {name} needs network faults (`isrsim net`), which this isrsim lacks")
    expected = scenario.expected_under(mode, verification)
    console.rule(f"[bold]{name}[/]: {scenario.title}")
    console.print(scenario.story)
    shown = mode if verification else f"{mode}, {VERIFICATION_KEY}=false"
    console.print(f"\nmode [bold]{shown}[/]: expected: {expected.describe()}")
    if expected.why:
        console.print(f"  ({expected.why})")
    settings = scenario.settings if verification else (*scenario.settings, f"{VERIFICATION_KEY}=false")
    run = ScenarioRun(root.resolve(), mode, console, settings)
    try:
        scenario.play(run)
        run.down()
    except BaseException:
        run.cleanup()
        raise
    run.cleanup()
    ev = gather(run.cluster, run.replicas, TOPIC, PARTITION)
    show_evidence(console, ev)
    verdict: str | None = None
    failed: list[str] = []
    if report:
        verdict, failed = run_report(run.root, console)
    out = Outcome(name, mode, expected, ev.outcome, verdict, failed, run.root)
    summary(console, out, ev)
    return out


def show_evidence(console: Console, ev: Evidence) -> None:
    console.rule("what the segment files show")
    for r in ev.logs:
        console.print(f"broker {r.broker}: {len(r.batches)} batches, LEO {r.leo}, HW (checkpoint) {r.hw}")
    for a in ev.lost_everywhere:
        console.print(
            f"[red]acknowledged (acks=all) batch {a.base_offset}-{a.last_offset} is on no replica[/]"
        )
    for a, where in ev.missing_somewhere:
        console.print(
            f"[red]acknowledged batch {a.base_offset}-{a.last_offset} missing on brokers {where}[/]"
        )
    for a in ev.acks1_lost:
        console.print(f"acks=1 batch {a.base_offset}-{a.last_offset} is on no replica (allowed for acks=1)")
    if ev.diverged:
        console.print(f"[red]replicas hold different batches below the HW at offsets {ev.diverged}[/]")
    table = side_by_side(ev, interesting_offsets(ev))
    if table is not None:
        console.print(table)


def run_report(root: Path, console: Console) -> tuple[str, list[str]]:
    out = root / "report"
    console.rule("the consistency report")
    env = dict(os.environ)
    if not console.is_terminal:
        env.setdefault("COLUMNS", str(console.width))
    cmd = [sys.executable, "-m", "cli.main", "report", "--data-dir", str(root), "--out", str(out)]
    subprocess.run(cmd, env=env)
    return report_verdict(out / "report.json")


def report_verdict(path: Path) -> tuple[str, list[str]]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "unreadable", []
    return str(data.get("verdict")), [c["name"] for c in data.get("checks", []) if not c.get("passed")]


def summary(console: Console, out: Outcome, ev: Evidence) -> None:
    console.rule(f"{out.scenario} under {out.mode}")
    console.print(f"expected: {out.expected.describe()}")
    seen = OUTCOMES[out.seen_outcome]
    if out.report_verdict is None:
        report = "the report was not run (--no-report)"
    elif out.report_verdict == "valid":
        report = "the report is valid"
    elif out.report_verdict == "invalid":
        report = f"the report is INVALID ({', '.join(out.failed_checks) or 'no check named'})"
    else:
        report = f"the report is {out.report_verdict.upper()}"
    console.print(f"seen:     {seen}; {report}")
    if out.as_expected:
        plain = "as expected" + (
            f": under {out.mode} this story is a bug, and the report says so"
            if not out.expected.report_passes
            else ""
        )
        console.print(f"[bold green]{plain}[/]")
    else:
        console.print("[bold red]NOT as expected[/]")
    if out.root is not None and out.report_verdict is not None:
        console.print(f"report: {out.root / 'report' / 'report.html'} (timelines of LEO/HW per replica)")
