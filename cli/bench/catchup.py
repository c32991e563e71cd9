from __future__ import annotations

from cli.bench.context import BenchContext, Skip
from cli.bench.results import ScenarioResult


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    raise Skip("not written yet")
