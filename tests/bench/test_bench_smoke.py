"""The benchmark harness itself keeps working: ``isrsim bench --quick --only ceiling,kafka-client`` runs to
the end and writes ``results.json`` with its figures and the machine: the ceiling's, and librdkafka's next to
the msgpack producer's (records/s, broker CPU per 1,000 records, their ratio). No speed is asserted (a
benchmark is not a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_ceiling_and_kafka_client_write_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "bench",
            "--quick",
            "--only",
            "ceiling,kafka-client",
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
    ceiling, kafka_client = doc["scenarios"]
    assert ceiling["name"] == "ceiling" and ceiling["status"] == "ok", ceiling
    figures = {f["key"]: f for f in ceiling["figures"]}
    for key in ("loopback_mb_s", "file_append_mb_s", "file_read_mb_s"):
        assert figures[key]["unit"] == "MB/s"
        assert isinstance(figures[key]["value"], float) and figures[key]["value"] > 0
    assert kafka_client["name"] == "kafka-client" and kafka_client["status"] == "ok", kafka_client
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
    # The temporary root is removed.
    assert not list(tmp_path.glob("isrsim-bench-*"))
    assert "ceiling" in proc.stdout and "kafka-client" in proc.stdout


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
