"""``isrsim run -- COMMAND``: the user's own program as the workload, under the seeded nemesis; the run
itself is :mod:`lab.chaos.app_run` (docs/your-application.md)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import click
import trio
from rich.console import Console
from rich.markup import escape

from kit.cluster_client import ClientError, bootstrap_from
from kit.cluster_files import ClusterError, ClusterInfo
from kit.processes import process_state
from kit.protocol_faults import RuleInputError, load_rules_file
from kit.run_clock import RunClock
from lab.chaos.app_run import AppRun, app_environment, app_log_path, client_properties
from lab.chaos.nemesis import ChaosError
from lab.chaos.run import check_cluster, first_error, run_report, stop_cluster, summary, write_run
from lab.chaos.schedule import FAULT_KINDS, ScheduleError, make_schedule
from lab.chaos.view import ChaosState, ChaosView
from protocol import CHAOS_FILE, CLIENT_PROPERTIES

APP_FAILED = 4  # the program exited with a failure (its code is printed)
INTERRUPTED = 130


def _running(info: ClusterInfo) -> bool:
    nodes = [*info.brokers, *info.controllers]
    return bool(nodes) and all(process_state(n.pid) == "running" for n in nodes)


def _bring_up(data_dir: Path, secure: bool, console: Console) -> None:
    """``isrsim cluster up`` at ``data_dir`` (OS-assigned ports for a new one: the program is told them)."""
    args = [sys.executable, "-m", "cli.main", "cluster", "up", "--data-dir", str(data_dir)]
    if not (data_dir / "cluster.json").exists():
        args += ["--base-port", "0"]
        if secure:
            args.append("--secure")
    console.print(f"no cluster running at {data_dir}: bringing one up", highlight=False)
    proc = subprocess.run(args)
    if proc.returncode != 0:
        raise click.ClickException(
            f"`isrsim cluster up --data-dir {data_dir}` failed (exit {proc.returncode})"
        )


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("isrsim-data"),
    show_default=True,
    envvar="ISRSIM_DATA_DIR",
    help="The cluster root: the cluster running there is used, else one is brought up (and stopped after).",
)
@click.option(
    "--seed", type=int, default=None, help="Seed of the fault schedule (default: drawn and printed)."
)
@click.option(
    "--duration",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds the program may run (faults too).",
)
@click.option("--interval", type=float, default=3.0, show_default=True, help="Seconds between fault starts.")
@click.option(
    "--faults", default=",".join(FAULT_KINDS), show_default=True, help="Fault kinds, comma-separated."
)
@click.option(
    "--targets",
    default="brokers,controllers",
    show_default=True,
    help="What kill, term, pause and isolate fall on: brokers, controllers, or both.",
)
@click.option(
    "--max-down", type=int, default=1, show_default=True, help="Brokers unavailable at once, at most."
)
@click.option("--no-faults", is_flag=True, help="Run the program without the nemesis (a baseline).")
@click.option("--keep-up", is_flag=True, help="Leave a cluster this command brought up running after.")
@click.option("--secure", is_flag=True, help="Bring a new cluster up with SASL_SSL (docs/security.md).")
@click.option(
    "--converge-timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for convergence.",
)
@click.option("--no-report", is_flag=True, help="Skip the report.")
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Protocol-level fault rules (YAML or JSON list, `isrsim fault add`'s options) in force while "
    "COMMAND runs: added at the start, removed at the end (docs/faults.md).",
)
@click.option(
    "--min-progress",
    type=click.IntRange(min=1),
    default=None,
    help="The report's progress_during_faults: at least N records acknowledged during every fault [off].",
)
@click.option(
    "--include-internal", is_flag=True, help="The report shows the internal topics too (isrsim report's)."
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(
    data_dir: Path,
    seed: int | None,
    duration: float,
    interval: float,
    faults: str,
    targets: str,
    max_down: int,
    no_faults: bool,
    keep_up: bool,
    secure: bool,
    converge_timeout: float,
    no_report: bool,
    rules_file: Path | None,
    min_progress: int | None,
    include_internal: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (your own program, any language, any Kafka client) against the cluster while a seeded
    nemesis breaks it; then heal, converge, stop what was started, and run the report.

    COMMAND gets KAFKA_BOOTSTRAP_SERVERS, ISRSIM_DATA_DIR, ISRSIM_SEED and ISRSIM_CLIENT_PROPERTIES in its
    environment; its output goes to <root>/workload/app-<n>.log and to the terminal. When it exits, or
    --duration ends (then it gets SIGTERM, and SIGKILL 10 s later), the faults are healed. Exit code: 4
    when COMMAND failed (its code is printed), else the report's (0 valid, 1 violation, 3 unknown); 130
    on Ctrl-C. Example: isrsim run --seed 7 --duration 60 -- python my_producer.py
    """
    if duration <= 0:
        raise click.UsageError(f"--duration must be > 0 seconds (got {duration:g})")
    try:
        rules = load_rules_file(rules_file) if rules_file is not None else []
    except RuleInputError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    started_cluster = False
    info: ClusterInfo | None = None
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError:
        info = None
    if info is None or not _running(info):
        _bring_up(data_dir, secure, console)
        started_cluster = True
        try:
            info = ClusterInfo.load(data_dir)
        except ClusterError as exc:
            raise click.ClickException(str(exc)) from None
    elif secure and not (Path(info.root) / CLIENT_PROPERTIES).is_file():
        raise click.UsageError(f"--secure: the cluster running at {data_dir} is not a secure one")
    assert info is not None
    root = Path(info.root)

    def stop_started() -> None:
        if started_cluster and not keep_up:
            console.print("stopping the cluster this run brought up (controlled shutdown)")
            stop_cluster(info)

    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    try:
        schedule = make_schedule(
            seed,
            duration,
            interval,
            faults,
            max_down,
            [b.id for b in info.brokers],
            [c.id for c in info.controllers] if info.several_voters else [],
            targets=targets,
        )
    except ScheduleError as exc:
        stop_started()
        raise click.UsageError(str(exc)) from None
    try:
        check_cluster(info)
        bootstrap = bootstrap_from(None, data_dir)
    except (ClusterError, ClientError) as exc:
        stop_started()
        raise click.ClickException(str(exc)) from None
    properties = client_properties(root, bootstrap)
    env = app_environment(os.environ, bootstrap, root, seed, properties)
    log_path = app_log_path(root)
    if no_faults:
        console.print(f"no faults (--no-faults); the program may run {duration:g}s", highlight=False)
    else:
        (root / CHAOS_FILE).write_text(schedule.to_json(), encoding="utf-8")
        console.print(
            f"seed {seed} (replay: --seed {seed}); {summary(schedule)}; written to {root / CHAOS_FILE}",
            highlight=False,
        )
    console.print(f"KAFKA_BOOTSTRAP_SERVERS={env['KAFKA_BOOTSTRAP_SERVERS']}", highlight=False)
    state = ChaosState(duration_s=schedule.duration_s, phase="running the program", show_acked=False)
    started_ms = int(time.time() * 1000)
    clock = RunClock(root)
    error: str | None = None
    interrupted = False
    with ChaosView(console, state, clock) as view:
        app = AppRun(
            info, schedule, command, env, log_path, converge_timeout, view, faults=not no_faults, rules=rules
        )
        try:
            outcome = trio.run(app.main)
        except BaseExceptionGroup as group:
            chaos_error = first_error(group, ChaosError)
            os_error = first_error(group, OSError)
            outcome = app.outcome
            if group.split(KeyboardInterrupt)[0] is not None:
                interrupted = True
            elif chaos_error is not None:
                error = str(chaos_error)
            elif os_error is not None and app.exit_code is None:
                error = f"cannot start {command[0]}: {os_error}"
            else:
                raise
        except ChaosError as exc:
            outcome, error = app.outcome, str(exc)
        except OSError as exc:
            if app.exit_code is not None:
                raise
            outcome, error = app.outcome, f"cannot start {command[0]}: {exc}"
        except KeyboardInterrupt:
            outcome, interrupted = app.outcome, True
        if interrupted or error is not None:
            view.say(
                "interrupted: healing and restarting what the nemesis broke"
                if interrupted
                else f"[red]{escape(error or '')}[/]: healing and restarting what the nemesis broke"
            )
            try:
                done = trio.run(app.nemesis.heal_everything)
                view.say(", ".join(done) or "nothing was left broken")
            except ChaosError as exc:
                view.say(f"[red]{escape(str(exc))}[/]")
    if interrupted or error is not None:
        stop_started()
        if interrupted:
            raise SystemExit(INTERRUPTED)
        raise click.ClickException(error or "")
    injected = sum(outcome.injected.values())
    if not no_faults:
        kinds = ", ".join(f"{k} {outcome.injected[k]}" for k in FAULT_KINDS if k in outcome.injected)
        skipped = f"; skipped: {outcome.skipped}" if outcome.skipped else ""
        console.print(f"faults injected: {injected} ({kinds or 'none'}){skipped}", highlight=False)
    code = app.exit_code
    failed = code is not None and code != 0 and app.stopped_by is None
    if app.stopped_by is not None:
        console.print(
            f"the program was still running at the end of --duration: stopped ({app.stopped_by})",
            highlight=False,
        )
    elif code is not None:
        console.print(f"the program exited with code {code}", highlight=False)
    if outcome.not_converged:
        console.print(
            "[red]replicas not in sync[/] before the timeout: " + "; ".join(outcome.not_converged[:12]),
            highlight=False,
        )
    if started_cluster and not keep_up:
        console.print("stopping the cluster (controlled shutdown)")
        stop_cluster(info)
    report: int | None = None
    if not no_report:
        console.print("reporting")
        options = ("--include-internal",) if include_internal else ()
        if min_progress is not None:
            options += ("--min-progress", str(min_progress))
        report = run_report(root, options)
    write_run(root, schedule, outcome, started_ms, None, report, "app: " + " ".join(command))
    if failed:
        console.print(f"[red]the program failed: exit code {code}[/] (output in {log_path})", highlight=False)
        sys.exit(APP_FAILED)
    if report is None:
        sys.exit(1 if outcome.not_converged else 0)
    if outcome.not_converged and report in (0, 3):
        console.print("[red]no violation found, but the replicas were not in sync before the stop[/]")
        report = 1
    sys.exit(report)


__all__ = ["run"]
