"""``isrsim sim explore`` (SPEC §15): many seeds, each a ``sim run`` of its own process (a run installs a
process-wide environment), ``jobs`` at a time. A passing seed's directory is removed; a failing seed's is
kept with the command that replays it."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kit.processes import isrsim_command
from lab.sim.run import SimError

_LINE = re.compile(r"^seed \d+: (?P<virtual>[\d.]+) virtual s", re.MULTILINE)
_VERDICT = re.compile(r"^sim-verdict (?P<verdict>\w+) steps=(?P<steps>\d+)$", re.MULTILINE)
_VIOLATION = re.compile(r"^violation: (.*)$", re.MULTILINE)


@dataclass
class SeedOutcome:
    seed: int
    verdict: str
    steps: int
    virtual_s: float
    wall_s: float
    out: Path
    replay: str
    violations: list[str]


def parse_seeds(text: str) -> range:
    """``A..B`` (both included) or a single seed."""
    found = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if found is None:
        raise SimError(f"--seeds {text!r}: give A..B (both included), such as 1..300")
    first = int(found.group(1))
    last = int(found.group(2)) if found.group(2) else first
    if last < first:
        raise SimError(f"--seeds {text}: the last seed is before the first")
    return range(first, last + 1)


def explore(
    seeds: range,
    out: Path,
    run_args: list[str],
    jobs: int,
    on_outcome: Callable[[SeedOutcome], None],
) -> list[SeedOutcome]:
    """Runs every seed (``run_args``: the options every ``sim run`` gets) and returns the outcomes in seed
    order; ``on_outcome`` hears each as it ends."""
    out.mkdir(parents=True, exist_ok=True)
    pending: Iterator[int] = iter(seeds)
    running: dict[int, tuple[subprocess.Popen[str], float, Path, list[str]]] = {}
    outcomes: list[SeedOutcome] = []
    while True:
        while len(running) < jobs:
            seed = next(pending, None)
            if seed is None:
                break
            seed_dir = out / f"seed-{seed}"
            shutil.rmtree(seed_dir, ignore_errors=True)
            args = ["sim", "run", "--seed", str(seed), *run_args, "--out", str(seed_dir)]
            proc = subprocess.Popen(
                isrsim_command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            running[seed] = (proc, time.perf_counter(), seed_dir, args)
        if not running:
            break
        done = [s for s, (p, _, _, _) in running.items() if p.poll() is not None]
        if not done:
            time.sleep(0.05)
            continue
        for seed in done:
            proc, started, seed_dir, args = running.pop(seed)
            text = proc.stdout.read() if proc.stdout is not None else ""
            wall = time.perf_counter() - started
            verdict = _VERDICT.search(text)
            line = _LINE.search(text)
            outcome = SeedOutcome(
                seed=seed,
                verdict=verdict.group("verdict") if verdict else f"ERROR(exit {proc.returncode})",
                steps=int(verdict.group("steps")) if verdict else 0,
                virtual_s=float(line.group("virtual")) if line else 0.0,
                wall_s=wall,
                out=seed_dir,
                # The files name their directory: the replay runs where the seed ran, the kept run aside.
                replay=f"mv {seed_dir} {seed_dir}.failed && isrsim " + " ".join(args),
                violations=_VIOLATION.findall(text) or ([] if verdict else text.strip().splitlines()[-3:]),
            )
            if outcome.verdict == "ok":
                shutil.rmtree(seed_dir, ignore_errors=True)
            outcomes.append(outcome)
            on_outcome(outcome)
    return sorted(outcomes, key=lambda o: o.seed)
