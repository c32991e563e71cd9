"""``isrsim chaos``: the options, the status line and the exit code; the run itself is :mod:`lab.chaos.run`
(docs/faults.md)."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import click
import trio
from rich.console import Console
from rich.markup import escape

from kit.cluster_client import ClientError, bootstrap_from
from kit.cluster_files import ClusterError, ClusterInfo
from kit.librdkafka_producer import LibrdkafkaMissing, require_librdkafka
from kit.producer import ACKS_BY_NAME
from kit.protocol_faults import RuleInputError, load_rules_file
from kit.run_clock import RunClock
from lab.chaos.nemesis import ChaosError
from lab.chaos.run import (
    CLIENTS,
    NO_WORKLOAD,
    TRANSACTIONS,
    ChaosRun,
    Outcome,
    check_cluster,
    ensure_topic,
    first_error,
    in_sync_figures,
    run_report,
    stop_cluster,
    summary,
    transactions_out_topic,
    write_run,
)
from lab.chaos.schedule import ScheduleError, make_schedule
from lab.chaos.view import ChaosState, ChaosView
from protocol import CHAOS_FILE, FAULT_KINDS

# ---------------------------------------------------------------------------------------------- views


# ---------------------------------------------------------------------------------------------- runner


# ---------------------------------------------------------------------------------------------- command


@click.command("chaos")
@click.option("--seed", type=int, default=None, help="Seed of the schedule (default: drawn and printed).")
@click.option("--duration", type=float, default=120.0, show_default=True, help="Seconds of faults.")
@click.option("--interval", type=float, default=3.0, show_default=True, help="Seconds between fault starts.")
@click.option(
    "--faults", default=",".join(FAULT_KINDS), show_default=True, help="Fault kinds, comma-separated."
)
@click.option(
    "--max-down", type=int, default=1, show_default=True, help="Brokers unavailable at once, at most."
)
@click.option(
    "--targets",
    default="brokers,controllers",
    show_default=True,
    help="What kill, term, pause and isolate fall on: brokers, controllers (the quorum's voters; an "
    "isolation falls on the active controller), or both.",
)
@click.option(
    "--allow-quorum-loss",
    is_flag=True,
    help="Let the faults take down a majority of the controllers (all but one); by default at most a "
    "minority is down at once, so the quorum can always elect and commit.",
)
@click.option("--rate", type=float, default=2000.0, show_default=True, help="Workload records per second.")
@click.option("--acks", type=click.Choice(["all", "-1", "1"]), default="all", show_default=True)
@click.option("--topic", default="chaos", show_default=True, help="Workload topic (created if missing).")
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=6,
    show_default=True,
    help="Partitions of a new topic.",
)
@click.option(
    "--replication-factor",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Replication factor of a new topic.",
)
@click.option(
    "--converge-timeout",
    type=float,
    default=120.0,
    show_default=True,
    help="Seconds to wait for convergence.",
)
@click.option("--dry-run", is_flag=True, help="Print the schedule (chaos.json's content) and do nothing.")
@click.option("--no-report", is_flag=True, help="Stop the cluster but skip the report.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("isrsim-data"),
    show_default=True,
    envvar="ISRSIM_DATA_DIR",
    help="The cluster root (cluster.json; chaos.json and faults.jsonl go there); or $ISRSIM_DATA_DIR.",
)
@click.option(
    "--bootstrap-server", default=None, help="host:port the workload bootstraps from (default: cluster.json)."
)
@click.option(
    "--client",
    type=click.Choice(CLIENTS),
    default="isrsim",
    show_default=True,
    help="The workload's producer: isrsim's own, or Kafka's C client (librdkafka: confluent-kafka, "
    "idempotent with acks=all, linger.ms=5, the root's client.properties if any), judged by the leaders' "
    "acked.jsonl.",
)
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Protocol-level fault rules (YAML or JSON list, `isrsim fault add`'s options) in force while the "
    "nemesis runs: added at the start, removed at the end (docs/faults.md).",
)
@click.option(
    "--workload",
    type=click.Choice(["producer", TRANSACTIONS, NO_WORKLOAD]),
    default="producer",
    show_default=True,
    help="producer: the run's own acks=all producer (--client); transactions: exactly-once through Kafka's "
    "C client (a transactional source and a consume-transform-produce processor with TxnOffsetCommit into "
    "<topic>-out, docs/transactions.md); none: faults only, for a program started "
    "elsewhere (docs/your-application.md; `isrsim run` starts one for you).",
)
def chaos(
    seed: int | None,
    duration: float,
    interval: float,
    faults: str,
    max_down: int,
    targets: str,
    allow_quorum_loss: bool,
    rate: float,
    acks: str,
    topic: str,
    partitions: int,
    replication_factor: int,
    converge_timeout: float,
    dry_run: bool,
    no_report: bool,
    data_dir: Path,
    bootstrap_server: str | None,
    client: str,
    rules_file: Path | None,
    workload: str,
) -> None:
    """Run an acks=all workload and a seeded nemesis (kill, term, pause, partition, isolate, delay, loss)
    against a running cluster; then heal everything, wait for convergence, stop the cluster and run the
    report. The exit code is the report's.

    The schedule is a pure function of --seed, --duration, --interval, --faults, --max-down, --targets,
    --allow-quorum-loss and the broker and controller ids, written to <root>/chaos.json; every action is
    appended to <root>/faults.jsonl. See docs/faults.md.
    """
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
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
            allow_quorum_loss=allow_quorum_loss,
        )
    except ScheduleError as exc:
        raise click.UsageError(str(exc)) from None
    if rate <= 0:
        raise click.UsageError(f"--rate must be > 0 records/s (got {rate:g})")
    try:
        rules = load_rules_file(rules_file) if rules_file is not None else []
    except RuleInputError as exc:
        raise click.UsageError(str(exc)) from None
    if workload == NO_WORKLOAD:
        client = NO_WORKLOAD
    elif workload == TRANSACTIONS:
        client = TRANSACTIONS
    if client in ("librdkafka", TRANSACTIONS) and not dry_run:
        try:
            require_librdkafka("`isrsim chaos --client librdkafka`")
        except LibrdkafkaMissing as exc:
            raise click.ClickException(str(exc)) from None
    if dry_run:
        click.echo(schedule.to_json(), nl=False)
        click.echo(summary(schedule), err=True)
        return
    root = Path(info.root)
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a log or a pipe: one status line is one line
    try:
        check_cluster(info)
        if client != NO_WORKLOAD:
            console.print(ensure_topic(info, topic, partitions, replication_factor))
        if client == TRANSACTIONS:
            out = transactions_out_topic(topic)
            console.print(ensure_topic(info, out, partitions, replication_factor))
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
    except (ClusterError, ClientError) as exc:
        raise click.ClickException(str(exc)) from None
    (root / CHAOS_FILE).write_text(schedule.to_json(), encoding="utf-8")
    console.print(f"seed {seed} (replay: --seed {seed}); {summary(schedule)}; written to {root / CHAOS_FILE}")
    state = ChaosState(duration_s=schedule.duration_s, show_acked=client != NO_WORKLOAD)
    if client == NO_WORKLOAD:
        state.phase = "faults only"
    started_ms = int(time.time() * 1000)
    clock = RunClock(root)
    origin = clock.anchor()
    if origin is not None:
        console.print(
            f"times are seconds since {origin.describe()}, as in the report; "
            f"the schedule's 0 s is {clock.seconds(started_ms):.1f} s",
            highlight=False,
        )
    error: str | None = None
    with ChaosView(console, state, clock) as view:
        run = ChaosRun(
            info,
            schedule,
            "" if client == NO_WORKLOAD else topic,
            rate,
            ACKS_BY_NAME[acks],
            bootstrap,
            converge_timeout,
            view,
            client=client,
            rules=rules,
        )
        interrupted = False
        try:
            outcome = trio.run(run.main)
        except BaseExceptionGroup as group:
            chaos_error = first_error(group, ChaosError)
            outcome = run.outcome
            if group.split(KeyboardInterrupt)[0] is not None:
                interrupted = True
            elif chaos_error is None:
                raise
            else:
                error = str(chaos_error)
        except ChaosError as exc:
            outcome, error = run.outcome, str(exc)
        except KeyboardInterrupt:
            outcome, interrupted = run.outcome, True
        if error is not None:
            view.say(f"[red]{escape(error)}[/]: resuming, healing and restarting what can be")
            try:
                view.say(", ".join(trio.run(run.remove_rules)) or "no fault rules to remove")
                trio.run(run.nemesis.heal_everything)
            except ChaosError as exc:
                view.say(f"[red]{escape(str(exc))}[/]")
        if interrupted:
            view.say("interrupted: resuming, healing and restarting what the nemesis broke")
            done = trio.run(run.remove_rules) + trio.run(run.nemesis.heal_everything)
            view.say(", ".join(done) or "nothing was left broken")
            raise SystemExit(130)
    _print_outcome(console, outcome, client, clock)
    if error is not None:
        write_run(root, schedule, outcome, started_ms, error, None, client)
        raise click.ClickException(
            f"{error}; the cluster is left running for a look (`isrsim cluster status`)"
        )
    console.print("stopping the cluster (controlled shutdown)")
    stop_cluster(info)
    if no_report:
        write_run(root, schedule, outcome, started_ms, None, None, client)
        sys.exit(1 if outcome.not_converged else 0)
    code = run_report(root)
    write_run(root, schedule, outcome, started_ms, None, code, client)
    if outcome.not_converged and code in (0, 3):
        # 3 is the report's "unknown": a run that did not converge is a failure whatever the report says.
        console.print("[red]no violation found, but the replicas were not in sync before the stop[/]")
        code = 1
    sys.exit(code)


def _print_outcome(console: Console, o: Outcome, client: str, clock: RunClock) -> None:
    kinds = ", ".join(f"{k} {o.injected[k]}" for k in FAULT_KINDS if k in o.injected)
    skipped = f"; skipped: {o.skipped}" if o.skipped else ""
    console.print(
        f"faults injected: {sum(o.injected.values())} ({kinds or 'none'}){skipped}", highlight=False
    )
    if o.stats is not None and client == TRANSACTIONS:
        s = o.stats
        line = (
            f"workload (transactions): {s.records_acked:,} records in committed transactions, "
            f"{s.records_failed:,} in aborted ones"
        )
        if s.errors:
            line += f"; errors seen: {s.errors_seen(6)}"
        console.print(line, highlight=False)
    elif o.stats is not None and client == "librdkafka":
        s = o.stats
        unknown = max(0, s.records_sent - s.records_acked - s.records_failed)
        line = (
            f"workload (librdkafka): {s.records_acked:,} records acknowledged of {s.records_sent:,} sent; "
            f"{s.records_failed:,} failed (delivery timeout), {unknown:,} unknown"
        )
        if s.errors:
            line += f"; errors seen: {s.errors_seen(6)}"
        console.print(line, highlight=False)
    elif o.stats is not None:
        s = o.stats
        line = f"workload: {s.records_acked:,} records acknowledged in {s.batches_acked:,} batches"
        if s.batches_failed:
            line += f"; {s.batches_failed} batches not acknowledged (delivery timeout)"
        if s.errors:
            line += f"; errors seen: {s.errors_seen(6)}"
        console.print(line, highlight=False)
    f = in_sync_figures(o, clock)
    if f["in_sync_s"] is not None:
        # "In sync" (asked of the brokers) is not the report's "ISR full" (from the journals).
        last = "no fault ended"
        if f["last_fault_end_s"] is not None:
            ended = f"{f['last_fault_end_s']:.1f}s"
            last = f"{f['in_sync_after_last_fault_s']:.1f}s after the last fault ended ({ended})"
        console.print(
            f"[green]replicas in sync[/] (every replica in its ISR, one LEO, HW = LEO) at "
            f"{f['in_sync_s']:.1f}s: {last}, {f['in_sync_after_workload_s'] or 0:.1f}s after the workload "
            f"stopped ({f['workload_stopped_s'] or 0:.1f}s)",
            highlight=False,
        )
    elif o.not_converged:
        console.print(
            "[red]replicas not in sync[/] before the timeout: " + "; ".join(o.not_converged[:12]),
            highlight=False,
        )


__all__ = ["chaos"]
