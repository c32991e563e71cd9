"""`isrsim run` under programs no one here wrote the client of (docs/your-application.md), judged by the
report: a KafkaJS producer and group consumer through faults (VALID, its records counted, its idle pause
no stall), a kafka-python consumer that commits past what it read (consumer_no_skip INVALID, naming the
group and the offsets), and a broker killed under a librdkafka producer (its stall names that kill).

Whole clusters and a Spark report each: marker ``clients`` (`make clients`; `make kafkajs` installs
KafkaJS from npm into docs/examples/js)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import REPO_ROOT, run_cli

pytestmark = [pytest.mark.clients, pytest.mark.integration]

EXAMPLES = REPO_ROOT / "docs" / "examples"
PROGRAMS = Path(__file__).parent / "programs"


def report(root: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((root / "report" / "report.json").read_text())
    return body


def check(body: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in body["checks"] if c["name"] == name)


def stop_everything(root: Path) -> None:
    if (root / "cluster.json").exists():
        run_cli("cluster", "down", "--data-dir", str(root), check=False, timeout=120)


def seconds(body: dict[str, Any], ts_ms: int) -> float:
    return (ts_ms - int(body["t0_ms"])) / 1000


@pytest.mark.timeout(1800)
def test_a_kafka_python_consumer_that_commits_past_what_it_read_skips_records(tmp_path: Path) -> None:
    root = tmp_path / "root"
    try:
        proc = run_cli(
            "run", "--data-dir", str(root), "--no-faults", "--duration", "120", "--",
            sys.executable, str(PROGRAMS / "skipping_consumer.py"),
            check=False, timeout=1500,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the report: a violation
        body = report(root)
        skip = check(body, "consumer_no_skip")
        assert skip["verdict"] == "invalid" and skip["violations"] == 1
        [row] = skip["examples"]
        assert (row["group"], row["topic"], row["partition"]) == ("ledger-app", "ledger", 0)
        assert (row["committed_offset"], row["first_missing"], row["last_missing"]) == (200, 100, 199)
        assert row["clients"] == "ledger-consumer"
        assert "consumer_no_skip" in proc.stdout and "ledger-app" in proc.stdout
        again = check(body, "consumer_redelivery")
        assert again["verdict"] == "valid" and again["checked"] == 100
    finally:
        stop_everything(root)


@pytest.mark.timeout(2400)
def test_a_kafkajs_producer_and_group_consumer_through_faults(tmp_path: Path) -> None:
    if shutil.which("node") is None or not (EXAMPLES / "js" / "node_modules" / "kafkajs").is_dir():
        pytest.fail("KafkaJS is not installed: `make kafkajs` (npm install in docs/examples/js)")
    root = tmp_path / "root"
    try:
        proc = run_cli(
            "run", "--data-dir", str(root), "--seed", "5", "--duration", "150", "--interval", "8",
            "--faults", "kill,term", "--targets", "brokers", "--",
            "node", str(EXAMPLES / "js" / "orders.js"), "--count", "3000", "--pause", "8",
            check=False, timeout=2200,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
        body = report(root)
        assert body["verdict"] == "valid"
        clients = {c["client_id"]: c for c in body["clients"]}
        assert clients["orders-js"]["kind"] == "both"
        assert clients["orders-js"]["records_acked"] == 3000
        assert clients["orders-js"]["records_served"] >= 3000
        assert body["availability"]["acknowledged"] >= 3000  # its records, in the throughput
        assert check(body, "consumer_no_skip")["checked"] >= 1
        # The deliberate pause: no stall without a cause inside it (idle time is shown apart).
        log = (root / "workload" / "app-1.log").read_text()
        start = int(re.search(r"pause from (\d+)", log).group(1))  # type: ignore[union-attr]
        end = int(re.search(r"pause until (\d+)", log).group(1))  # type: ignore[union-attr]
        inside = [
            s
            for s in body["availability"]["stalls"]
            if s["from_s"] >= seconds(body, start) - 0.5 and s["to_s"] <= seconds(body, end) + 0.5
        ]
        assert all(s["cause"] != "unknown" or s["fault"] for s in inside), inside
    finally:
        stop_everything(root)
