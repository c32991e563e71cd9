"""``isrsim scenario list | run NAME``: Kafka's replication stories on a fresh local cluster
(docs/scenarios.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def scenario() -> None:
    """Replay KIP-101, KIP-279 and other replication stories on a fresh cluster, under a truncation mode."""


@scenario.command("list")
def scenario_list() -> None:
    """The scenarios, with what each truncation mode is expected to show."""
    from lab.scenarios import MODES, SCENARIOS, net_available

    has_net = net_available()
    for s in SCENARIOS.values():
        missing = "  [needs `isrsim net`, which this isrsim lacks]" if s.needs_net and not has_net else ""
        click.echo(f"{s.name}: {s.title}{missing}")
        if s.about_verification:
            for verification in (True, False):
                label = "verification on" if verification else "--no-transaction-verification"
                click.echo(f"    {label:<30} {s.expected_under(MODES[0], verification).describe()}")
            continue
        for mode in MODES:
            click.echo(f"    {mode:<26} {s.expected(mode).describe()}")


@scenario.command("run")
@click.argument("name")
@click.option(
    "--truncation-mode",
    "mode",
    type=click.Choice(["leader-epoch", "leader-epoch-pre-kip-279", "high-watermark"]),
    default="leader-epoch",
    show_default=True,
    help="The brokers' replication.truncation.mode.",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The scenario's own cluster root, wiped first [./isrsim-scenario-<name>].",
)
@click.option(
    "--transaction-verification/--no-transaction-verification",
    "verification",
    default=True,
    show_default=True,
    help="The brokers' transaction.partition.verification.enable (off: the legacy mode before KIP-890).",
)
@click.option("--no-report", is_flag=True, help="Judge from the segment files only; skip the Spark report.")
def scenario_run(name: str, mode: str, data_dir: Path | None, verification: bool, no_report: bool) -> None:
    """Bring up a fresh cluster, play scenario NAME, stop the cluster, run the report, and compare what was
    seen with what MODE is expected to show. Exit code 0: as expected (a failing report is expected under a
    buggy mode); 1: not as expected; 2: the script could not be played."""
    from rich.console import Console

    from kit.cluster_files import ClusterError
    from lab.scenarios import SCENARIOS, play

    if name not in SCENARIOS:
        raise click.BadParameter(
            f"no scenario {name!r}; `isrsim scenario list` names them: {', '.join(SCENARIOS)}"
        )
    root = data_dir or Path(f"isrsim-scenario-{name}")
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: keep the side-by-side tables on one line per batch
    try:
        outcome = play(name, mode, root, console, report=not no_report, verification=verification)
    except ClusterError as exc:
        console.print(f"[red]scenario {name} could not be played:[/] {exc}")
        raise SystemExit(2) from None
    raise SystemExit(0 if outcome.as_expected else 1)
