"""(10) The deterministic simulation's speed (SPEC §15, docs/simulation.md): seeds of 30 virtual seconds
(3 controllers, 3 brokers, kills, an acks=all idempotent producer) per hour on this machine, two at a time
(2 cores), and virtual seconds per wall second."""

from __future__ import annotations

import time

import trio

from lab.bench.context import BenchContext
from lab.bench.results import Figure, ScenarioResult, Target
from lab.sim.explore import SeedOutcome, explore

VIRTUAL_S = 30
JOBS = 2
TARGET_SEEDS_PER_HOUR = 1000


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    seeds = range(1, 3) if ctx.params.quick else range(1, 7)
    ctx.step(f"{len(seeds)} seeds of {VIRTUAL_S} virtual s, {JOBS} at a time")
    outcomes: list[SeedOutcome] = []
    started = time.perf_counter()
    await trio.to_thread.run_sync(
        lambda: explore(seeds, ctx.root / "sim", ["--duration", str(VIRTUAL_S)], JOBS, outcomes.append)
    )
    wall = time.perf_counter() - started
    virtual = sum(o.virtual_s for o in outcomes)
    busy = sum(o.wall_s for o in outcomes)
    failing = [o.seed for o in outcomes if o.verdict != "ok"]
    result.add(
        Figure(
            "sim_seeds_per_hour",
            f"(11) simulated seeds of {VIRTUAL_S} virtual s per hour, {JOBS} at a time",
            len(outcomes) / wall * 3600,
            "seeds/h",
            Target(">=", TARGET_SEEDS_PER_HOUR),
            note=f"{len(outcomes)} seeds in {wall:.0f} s" + (f"; failing: {failing}" if failing else ""),
        )
    )
    result.add(
        Figure(
            "sim_virtual_per_wall",
            "(10) virtual seconds per wall second, one seed",
            virtual / busy if busy else None,
            "x",
        )
    )
