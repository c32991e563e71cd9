"""``isrsim sim run`` (SPEC §15): one seed is one exact history. The same seed twice writes the same files
(the same ``sim-digest``); another seed another history."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from kit.processes import isrsim_command

DIGEST = re.compile(r"^sim-digest ([0-9a-f]{64})$", re.MULTILINE)


def _sim_run(seed: int, out: Path) -> str:
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run(
        isrsim_command("sim", "run", "--seed", str(seed), "--duration", "8", "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = DIGEST.search(done.stdout)
    assert found is not None, done.stdout
    return found.group(1)


def test_same_seed_same_digest_other_seed_other_digest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = _sim_run(7, out)
    # The run wrote the real layout and journals, with virtual time from 0.
    assert (out / "cluster.json").exists()
    acked = [
        json.loads(line)
        for line in (out / "broker-1" / "acked.jsonl").read_text().splitlines()
        + (out / "broker-2" / "acked.jsonl").read_text().splitlines()
        + (out / "broker-3" / "acked.jsonl").read_text().splitlines()
    ]
    assert acked, "the acks=all workload was acknowledged"
    assert all(0 < a["ts_ms"] < 60_000 for a in acked)
    assert _sim_run(7, out) == first
    assert _sim_run(8, out) != first
