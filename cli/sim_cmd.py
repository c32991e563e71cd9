"""``isrsim sim``: deterministic simulation (SPEC §15, docs/simulation.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

HASH_SEED = "0"


def _same_string_hashes() -> None:
    """A run hashes strings the same way every time: re-run this command with ``PYTHONHASHSEED=0``."""
    if os.environ.get("PYTHONHASHSEED") == HASH_SEED:
        return
    env = {**os.environ, "PYTHONHASHSEED": HASH_SEED}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _kinds(value: str) -> tuple[str, ...]:
    return tuple(k.strip() for k in value.split(",") if k.strip())


@click.group("sim")
def sim() -> None:
    """Run the cluster's own code in one process on a virtual clock: one seed, one exact history."""


@sim.command("run")
@click.option("--seed", type=int, default=None, help="The run's seed (default: a random one, printed).")
@click.option(
    "--duration", type=click.FloatRange(min=1), default=60.0, show_default=True, help="Virtual seconds."
)
@click.option("--brokers", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option("--controllers", type=click.IntRange(1, 9), default=3, show_default=True)
@click.option(
    "--faults",
    "faults",
    default="kill",
    show_default=True,
    help="Fault kinds, comma-separated ('none': none).",
)
@click.option(
    "--truncation-mode",
    default=None,
    help="The brokers' replication.truncation.mode (docs/truncation-modes.md).",
)
@click.option(
    "--workload",
    type=click.Choice(["acks-all", "idempotent"]),
    default="idempotent",
    show_default=True,
    help="acks=all producing (idempotent: with Kafka's idempotence, the default).",
)
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The run's directory (default: sim-runs/seed-S).",
)
def sim_run(
    seed: int | None,
    duration: float,
    brokers: int,
    controllers: int,
    faults: str,
    truncation_mode: str | None,
    workload: str,
    out: Path | None,
) -> None:
    """Run one seed and print its digest (`sim-digest <sha256>`); `isrsim report DIR` judges the run."""
    _same_string_hashes()
    import logging
    import random

    # The nodes' own logs would be the real processes' log files; here only what is fatal is shown.
    logging.basicConfig(level=logging.CRITICAL, stream=sys.stderr)

    from lab.sim.run import SimOptions, check_fault_kinds, run_simulation

    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    kinds = () if faults.strip() == "none" else _kinds(faults)
    check_fault_kinds(kinds)
    out = out if out is not None else Path("sim-runs") / f"seed-{seed}"
    result = run_simulation(
        SimOptions(
            seed=seed,
            out=out,
            duration_s=duration,
            brokers=brokers,
            controllers=controllers,
            faults=kinds,
            truncation_mode=truncation_mode,
            idempotent=workload == "idempotent",
        )
    )
    click.echo(
        f"seed {result.seed}: {result.virtual_s:.1f} virtual s in {result.wall_s:.1f} wall s, "
        f"{result.acked} records acknowledged, {result.faults} faults; the run is in {out}"
    )
    for violation in result.violations:
        click.echo(f"violation: {violation}")
    click.echo(f"sim-verdict {result.verdict} steps={result.steps}")
    click.echo(f"sim-digest {result.digest}")


@sim.command("explore")
@click.option("--seeds", required=True, help="Seeds A..B (both included), e.g. 1..300.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Seeds run at once.")
@click.option(
    "--duration", type=click.FloatRange(min=1), default=30.0, show_default=True, help="Virtual s a seed."
)
@click.option("--faults", "faults", default="kill", show_default=True, help="Fault kinds, comma-separated.")
@click.option("--truncation-mode", default=None, help="The brokers' replication.truncation.mode.")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sim-runs"),
    show_default=True,
    help="Where failing seeds' directories are kept.",
)
def sim_explore(
    seeds: str, jobs: int, duration: float, faults: str, truncation_mode: str | None, out: Path
) -> None:
    """Run many seeds with the online invariants; print `seed verdict steps virtual_s wall_s` per seed and
    the `sim run` command that replays each failing one. Exit status 1 if any seed failed."""
    from lab.sim.explore import SeedOutcome, explore, parse_seeds
    from lab.sim.run import check_fault_kinds

    kinds = () if faults.strip() == "none" else _kinds(faults)
    check_fault_kinds(kinds)
    run_args = ["--duration", f"{duration:g}", "--faults", ",".join(kinds) or "none"]
    if truncation_mode is not None:
        run_args += ["--truncation-mode", truncation_mode]
    click.echo("seed verdict steps virtual_s wall_s")

    def show(o: SeedOutcome) -> None:
        click.echo(f"{o.seed} {o.verdict} {o.steps} {o.virtual_s:.1f} {o.wall_s:.1f}")
        if o.verdict != "ok":
            for v in o.violations:
                click.echo(f"  {v}")
            click.echo(f"  replay: {o.replay}")

    outcomes = explore(parse_seeds(seeds), out, run_args, jobs, show)
    failed = [o for o in outcomes if o.verdict != "ok"]
    click.echo(
        f"{len(outcomes)} seeds, {len(failed)} failing" + (f": {[o.seed for o in failed]}" if failed else "")
    )
    if failed:
        sys.exit(1)
