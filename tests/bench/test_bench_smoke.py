"""The benchmark harness itself keeps working: ``isrsim bench --quick --only ceiling`` runs to the end and
writes ``results.json`` with its figures and the machine. No speed is asserted (a benchmark is not a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_ceiling_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "bench",
            "--quick",
            "--only",
            "ceiling",
            "--out",
            str(out),
            "--tmp-dir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["mode"] == "quick"
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["python"]
    assert doc["machine"]["packages"]["trio"]
    [ceiling] = doc["scenarios"]
    assert ceiling["name"] == "ceiling" and ceiling["status"] == "ok", ceiling
    figures = {f["key"]: f for f in ceiling["figures"]}
    for key in ("loopback_mb_s", "file_append_mb_s", "file_read_mb_s"):
        assert figures[key]["unit"] == "MB/s"
        assert isinstance(figures[key]["value"], float) and figures[key]["value"] > 0
    # The temporary root is removed.
    assert not list(tmp_path.glob("isrsim-bench-*"))
    assert "ceiling" in proc.stdout


def test_unknown_scenario_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "bench", "--only", "nope", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "unknown scenario" in proc.stderr
    assert not (tmp_path / "results.json").exists()
