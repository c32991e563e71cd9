"""Runs the selected scenarios one after the other, each in its own ``trio.run`` with a time limit, under
one temporary root that is always removed (Ctrl-C included); shows progress; collects the results.

The ceiling (scenario 1) always runs first, because every throughput figure is given as a ratio of it.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

import trio
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from kit.processes import kill_owned
from lab.bench import (
    catchup,
    ceiling,
    failover,
    fetch_sessions,
    kafka_client,
    report_job,
    security,
    sim,
    throughput,
    transactions,
)
from lab.bench.context import BenchContext, Params, Skip
from lab.bench.results import ScenarioResult, format_ratio, format_value

ScenarioFn = Callable[[BenchContext, ScenarioResult], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    run: ScenarioFn
    quick_limit_s: float
    full_limit_s: float
    keeps_data: bool = False


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("ceiling", "1. ceiling: loopback TCP and file append", ceiling.run, 60, 180),
    Scenario(
        "throughput", "2. replicated throughput (RF 3, acks=-1)", throughput.run_throughput, 150, 420, True
    ),
    Scenario("latency", "3. commit latency at 20,000 records/s", throughput.run_latency, 90, 240, True),
    Scenario("failover", "4. failover unavailability", failover.run, 150, 420),
    Scenario("catchup", "5. follower catch-up", catchup.run, 120, 420),
    Scenario("fetch-sessions", "6. fetch sessions, 1,000 idle partitions", fetch_sessions.run, 90, 240),
    Scenario("report", "7. report job segment read rate", report_job.run, 120, 300),
    Scenario("security", "8. SASL_SSL throughput next to PLAINTEXT", security.run, 120, 300),
    Scenario("kafka-client", "9. librdkafka (Kafka encoding) next to msgpack", kafka_client.run, 90, 300),
    Scenario("transactions", "10. transactional throughput next to idempotent", transactions.run, 120, 300),
    Scenario("sim", "11. deterministic simulation: seeds per hour", sim.run, 300, 900),
)
NAMES = tuple(s.name for s in SCENARIOS)


def select(only: Sequence[str]) -> list[Scenario]:
    """The scenarios named in ``only`` (comma-separated allowed; all if empty), ceiling first."""
    wanted = {n.strip() for item in only for n in item.split(",") if n.strip()}
    unknown = wanted - set(NAMES)
    if unknown:
        raise ValueError(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(NAMES)}")
    if not wanted:
        return list(SCENARIOS)
    wanted.add("ceiling")
    return [s for s in SCENARIOS if s.name in wanted]


def run_bench(
    *,
    quick: bool,
    only: Sequence[str],
    out_dir: Path,
    console: Console,
    keep: bool = False,
    profile: bool = False,
    temp_parent: Path | None = None,
    report_mb: int = 0,
    smoke: bool = False,
) -> tuple[list[ScenarioResult], bool]:
    """Runs the scenarios; returns their results and whether the run was interrupted. ``smoke``: the
    smallest sizes (``Params.smallest``), with the quick run's time limits."""
    scenarios = select(only)
    quick = quick or smoke
    base = Params.smallest(profile=profile) if smoke else Params.for_mode(quick, profile=profile)
    params = replace(base, report_mb=report_mb)
    root = Path(tempfile.mkdtemp(prefix="isrsim-bench-", dir=temp_parent))
    ctx = BenchContext(root=root, params=params, out_dir=out_dir)
    results: list[ScenarioResult] = []
    interrupted = False
    _TERMINATE["requested"] = False
    previous_term = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            overall = progress.add_task("scenarios", total=len(scenarios))
            for scenario in scenarios:
                if _TERMINATE["requested"]:
                    interrupted = True
                    break
                result = ScenarioResult(scenario.name, scenario.title)
                results.append(result)
                progress.update(overall, description=f"[bold]{scenario.title}[/]")
                steps: list[str] = []

                def on_step(text: str, s: Scenario = scenario, steps: list[str] = steps) -> None:
                    steps.append(text)
                    del steps[:-20]
                    progress.update(overall, description=f"[bold]{s.title}[/]: {text}")

                ctx.on_step = on_step
                ctx.on_note = lambda text: progress.console.print(f"  [yellow]note[/]: {text}")
                # The smoke run's sizes are tiny; its limits are the full run's (a net for a busy machine).
                limit = scenario.quick_limit_s if quick and not smoke else scenario.full_limit_s
                if scenario.name == "report":
                    limit += params.report_mb * 0.6  # filling and reading its own cluster (--report-mb)
                load0, cpu0 = _loadavg(), _cpu_ticks()
                t0 = time.monotonic()
                try:
                    trio.run(_limited, scenario.run, ctx, result, limit)
                except BaseException as exc:
                    if _interrupt_in(exc):
                        # Ctrl-C (possibly inside a group with what the cancellation caused), or SIGTERM.
                        result.status, result.reason = "failed", "interrupted"
                        interrupted = True
                    elif not isinstance(exc, Exception):
                        raise
                    elif (skip := _skip_in(exc)) is not None:
                        result.status, result.reason = "skipped", str(skip)
                    else:
                        result.status = "failed"
                        result.reason = _first_line(exc) + (f" (at: {steps[-1]})" if steps else "")
                        result.details["traceback"] = traceback.format_exc()
                        result.details["last_steps"] = list(steps)
                finally:
                    result.duration_s = time.monotonic() - t0
                    result.machine_load = _load_during(load0, cpu0)
                    kill_owned()
                    if not scenario.keeps_data and not keep:
                        shutil.rmtree(root / scenario.name, ignore_errors=True)
                progress.advance(overall)
                _print_result(progress.console, result)
                if interrupted:
                    break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        kill_owned()
        if keep:
            console.print(f"kept the benchmark's data under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return results, interrupted


_TERMINATE = {"requested": False}


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Outside a scenario: only note it; the loop stops before the next scenario.
    _TERMINATE["requested"] = True


async def _limited(fn: ScenarioFn, ctx: BenchContext, result: ScenarioResult, limit: float) -> None:
    """Runs a scenario with a time limit. SIGTERM cancels it (its ``finally`` blocks stop its processes)
    and then ends the run like Ctrl-C."""
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        try:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for _ in signals:
                        _TERMINATE["requested"] = True
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch)
                try:
                    with trio.fail_after(limit):
                        await fn(ctx, result)
                except trio.TooSlowError:
                    raise RuntimeError(f"did not finish within its limit of {limit:.0f}s") from None
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The scenario's own exception, not the group the watcher's nursery wrapped it in.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
    if _TERMINATE["requested"]:
        raise KeyboardInterrupt


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def _load_during(load0: float | None, cpu0: tuple[int, int] | None) -> dict[str, float | None]:
    """How busy the whole machine was during a scenario (ours and everyone else's processes)."""
    cpu1 = _cpu_ticks()
    busy = None
    if cpu0 is not None and cpu1 is not None and cpu1[1] > cpu0[1]:
        busy = round((cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 3)
    return {"loadavg_1m_start": load0, "loadavg_1m_end": _loadavg(), "machine_cpu_busy": busy}


def _interrupt_in(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupt_in(e) for e in exc.exceptions)
    return False


def _skip_in(exc: BaseException) -> Skip | None:
    """The :class:`Skip` that ended a scenario, also when a nursery wrapped it in a group."""
    if isinstance(exc, Skip):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _skip_in(exc.exceptions[0])
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    line = text.splitlines()[0]
    return line if len(line) <= 200 else line[:197] + "..."


def _print_result(console: Console, result: ScenarioResult) -> None:
    load = result.machine_load
    busy = load.get("machine_cpu_busy")
    where = (
        f", machine CPU {busy * 100:.0f}% busy, load {load.get('loadavg_1m_end')}" if busy is not None else ""
    )
    head = f"[bold]{result.title}[/] ({result.duration_s:.0f}s{where})"
    if result.status != "ok":
        style = "yellow" if result.status == "skipped" else "red"
        console.print(f"{head}: [{style}]{result.status}: {result.reason}[/]")
    else:
        console.print(f"{head}: [green]done[/]")
    for f in result.figures:
        met = f.met
        mark = "" if met is None else (" [green]met[/]" if met else " [red]missed[/]")
        ratio = format_ratio(f)
        target = f" (target {f.target.describe(f.unit)})" if f.target else ""
        console.print(
            f"  {f.label}: [bold]{format_value(f)}[/]{' = ' + ratio if ratio else ''}{target}{mark}"
        )
