"""The benchmark harness itself keeps working: every scenario of ``isrsim bench`` runs to the end in its
smallest form (``--smoke``) and writes ``results.json`` with its figures and the machine. No speed is
asserted (a benchmark is not a test).

The quick ones (with librdkafka next to the msgpack producer) run in ``make test`` (about 35 s together on a
2-core machine at load 14, 10 s of it the ceiling that ran alone before); failover, catch-up, fetch sessions
and the report job (a Spark session: a minute or more on a busy machine) carry the ``bench`` marker and run in
``make bench-smoke``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lab.bench.runner import NAMES

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK = ("ceiling", "throughput", "latency", "security", "kafka-client")
SLOW = ("failover", "catchup", "fetch-sessions", "report", "transactions", "sim")


def run_smoke(tmp_path: Path, names: tuple[str, ...], timeout: float) -> tuple[dict[str, Any], str]:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "bench", "--smoke", "--only", ",".join(names),
         "--out", str(out), "--tmp-dir", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc["mode"] == "smoke"
    by_name = {s["name"]: s for s in doc["scenarios"]}
    assert set(by_name) == {"ceiling", *names}
    for name, s in by_name.items():
        assert s["status"] == "ok", s
        assert s["figures"], name
        assert name in proc.stdout or s["title"].split(" ")[1] in proc.stdout
    # The temporary root is removed.
    assert not list(tmp_path.glob("isrsim-bench-*"))
    return by_name, proc.stdout


def test_every_scenario_is_smoke_tested() -> None:
    assert sorted(QUICK + SLOW) == sorted(NAMES)


@pytest.mark.timeout(300)
def test_bench_smoke_quick_scenarios_write_results(tmp_path: Path) -> None:
    by_name, _ = run_smoke(tmp_path, QUICK, timeout=280)
    doc = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["python"]
    assert doc["machine"]["packages"]["trio"]
    figures = {f["key"]: f for f in by_name["ceiling"]["figures"]}
    for key in ("loopback_mb_s", "file_append_mb_s", "file_read_mb_s"):
        assert figures[key]["unit"] == "MB/s"
        assert isinstance(figures[key]["value"], float) and figures[key]["value"] > 0
    kafka_client = by_name["kafka-client"]
    figures = {f["key"]: f for f in kafka_client["figures"]}
    for key in ("kafka_client_records_per_s", "kafka_client_msgpack_records_per_s"):
        assert figures[key]["unit"] == "records/s" and figures[key]["value"] > 0
    for key in (
        "kafka_client_broker_cpu_ms_per_1000_records",
        "kafka_client_msgpack_broker_cpu_ms_per_1000_records",
    ):
        assert figures[key]["unit"] == "ms" and figures[key]["value"] > 0
    ratio = figures["kafka_client_cpu_ratio"]
    assert ratio["value"] > 0 and ratio["target"]["limit"] == 1.10  # reported; not asserted as a speed
    assert kafka_client["details"]["librdkafka_records_per_batch"] > 1


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_bench_smoke_slow_scenarios_write_results(tmp_path: Path) -> None:
    """Failover, catch-up, fetch sessions and the report job; the report judges the bench's own data (the
    leaders' acked.jsonl) and says so: VALID, exit code 0."""
    by_name, stdout = run_smoke(tmp_path, SLOW, timeout=880)
    report = {f["key"]: f for f in by_name["report"]["figures"]}
    assert report["report_exit_code"]["value"] == 0, report["report_exit_code"]
    assert "verdict VALID" in report["report_exit_code"]["label"] and "verdict VALID" in stdout
    assert by_name["report"]["details"]["verdict"] == "valid"


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
