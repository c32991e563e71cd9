"""The report on a clean, fault-free run: a librdkafka producer (linger.ms=5) writes a few thousand
records to a three-replica topic and `isrsim cluster down` stops the cluster at once. The followers stop
before they learn the leader's last high watermark (their replication-offset-checkpoint lags), yet every
batch was replicated: `log_matching` compares them all below the final leader's HW, and the header says
that no fault happened while writes were in flight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.fault_overlap import NO_FAULT_IN_FLIGHT
from spark_jobs.report_job import EXIT_OK, run_report
from tests.integration.cluster_support import FAST
from tests.integration.harness import run_cli

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.clients]  # make clients

RECORDS = 5000


def _bootstrap(root: Path) -> str:
    info = json.loads((root / "cluster.json").read_text())
    return ",".join(f"{b['host']}:{b['port']}" for b in info["brokers"])


def _librdkafka_writes(root: Path) -> int:
    from confluent_kafka import Producer

    acked: list[int] = []
    p = Producer({"bootstrap.servers": _bootstrap(root), "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(
            "t",
            key=str(i).encode(),
            value=b"v" * 100,
            on_delivery=lambda e, m: acked.append(1) if not e else None,
        )
        p.poll(0)
    assert p.flush(60) == 0
    return len(acked)


def test_a_clean_run_is_valid_and_log_matching_compares_every_batch(tmp_path: Path, spark: Any) -> None:
    root = tmp_path / "cluster"
    args = ["cluster", "up", "--brokers", "3", "--data-dir", str(root), "--base-port", "0"]
    for s in FAST:
        args += ["--override", s]
    run_cli(*args, timeout=120)
    try:
        run_cli(
            "topic", "create", "t", "--partitions", "3", "--replication-factor", "3",
            "--data-dir", str(root), timeout=60,
        )  # fmt: skip
        assert _librdkafka_writes(root) == RECORDS
    finally:
        run_cli("cluster", "down", "--data-dir", str(root), timeout=120, check=False)
    out = tmp_path / "report"
    with open(tmp_path / "console.txt", "w") as f:
        outcome = run_report(spark, root, out, console=Console(file=f, width=100), max_plots=1)
    bad = {
        c["name"]: (c["notes"], c["examples"][:2])
        for c in outcome.report["checks"]
        if c["verdict"] != "valid"
    }
    assert outcome.exit_code == EXIT_OK, bad
    lm = next(c for c in outcome.report["checks"] if c["name"] == "log_matching")
    # Every replica's every batch: three replicas of each partition, each batch compared on all three.
    batches = outcome.report["inputs"]["batches"]
    print(f"log_matching examined {lm['checked']} of {batches} replica batches")
    assert lm["checked"] == batches > 0
    assert outcome.report["writes_during_faults"]["during_faults"] == 0
    console = (tmp_path / "console.txt").read_text()
    first = next(line for line in console.splitlines() if line.startswith("isrsim report: "))
    assert first.startswith("isrsim report: VALID"), console
    assert NO_FAULT_IN_FLIGHT in console
    assert NO_FAULT_IN_FLIGHT in (out / "report.html").read_text()
