"""``isrsim bench``: the benchmark suite (see ``docs/performance.md``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console

from lab.bench.results import machine_info, print_machine, results_table, write_results
from lab.bench.runner import NAMES, run_bench


@click.command("bench")
@click.option("--quick", is_flag=True, help="Smaller sizes: every scenario, in under 5 minutes.")
@click.option(
    "--smoke",
    is_flag=True,
    help="The smallest sizes: checks that every scenario runs (seconds each); its figures mean little.",
)
@click.option(
    "--only",
    "only",
    multiple=True,
    metavar="NAME",
    help="Run only these scenarios (repeatable or comma-separated; the ceiling always runs): "
    + ", ".join(NAMES)
    + ".",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    show_default=True,
    help="Directory for results.json (and profiles).",
)
@click.option(
    "--profile",
    is_flag=True,
    help="Sample brokers (and the producer) with py-spy during (2) and (6); needs py-spy.",
)
@click.option("--keep", is_flag=True, help="Keep the temporary cluster directories (their path is printed).")
@click.option(
    "--tmp-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Where to make the temporary root (default: the system's temp directory).",
)
@click.option(
    "--report-mb",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="(7) also on a cluster of its own with about this many MB of segments (e.g. 1000), to show how "
    "the report scales with its input.",
)
def bench(
    quick: bool,
    smoke: bool,
    only: tuple[str, ...],
    out_dir: Path,
    profile: bool,
    keep: bool,
    tmp_dir: Path | None,
    report_mb: int,
) -> None:
    """Benchmark this machine and isrsim: ceiling, replicated throughput, commit latency, failover,
    follower catch-up, fetch sessions and the report job, each figure next to its target and as a ratio of
    the machine's own limits measured in the same run.

    Starts its own brokers under a temporary root (removed at the end, also on Ctrl-C), prints a table and
    writes OUT/results.json. Exits 1 if a scenario failed (not when a target is missed).
    """
    console = Console(width=None if sys.stdout.isatty() else 140)
    machine = machine_info()
    print_machine(console, machine)
    started = time.time()
    try:
        results, interrupted = run_bench(
            quick=quick,
            smoke=smoke,
            only=only,
            out_dir=out_dir,
            console=console,
            keep=keep,
            profile=profile,
            temp_parent=tmp_dir,
            report_mb=report_mb,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--only") from None
    finished = time.time()
    mode = "smoke" if smoke else "quick" if quick else "full"
    console.print(results_table(results, title=f"isrsim bench ({mode}, {finished - started:.0f}s)"))
    path = write_results(
        out_dir,
        mode=mode,
        machine=machine,
        results=results,
        started=started,
        finished=finished,
        argv=sys.argv,
    )
    console.print(f"results: {path}")
    if interrupted:
        raise SystemExit(130)
    if any(r.status == "failed" for r in results):
        raise SystemExit(1)
