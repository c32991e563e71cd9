"""Scenario 7: the Spark report job's segment read rate on the data another scenario left behind.

Runs ``python -m spark_jobs.report_job --data-dir ROOT --master local[<cores>]`` on the cluster root the
latency scenario left (stopped cleanly; or, when that did not run, on a small cluster it fills itself),
and takes the job's own measurement of reading the segments (``inputs.read_mb_per_s`` of its
``report.json``), besides the wall time of the whole job (JVM start-up and every check included).
Skipped when pyspark or Java is not there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path

from cli.bench.cluster import BenchCluster, dir_bytes, reap, spawn, tail, wait_for
from cli.bench.context import BenchContext, Skip
from cli.bench.results import Figure, ScenarioResult
from cli.bench.throughput import produce
from cli.producer import ProducerSettings

FILL_RECORDS = 300_000


def report_job_available() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed"
    return None


async def _fill(ctx: BenchContext) -> Path:
    """A small cluster's worth of data when no scenario left any."""
    cluster = BenchCluster(ctx.scenario_dir("report-data"), {"min.insync.replicas": "2"})
    try:
        ctx.step("starting 3 brokers to write data for the report")
        await cluster.start([1, 2, 3])
        await cluster.assign("report", 3)
        settings = ProducerSettings(acks=-1, record_size=100, batch_records=1000)
        await produce(ctx, cluster, "report", settings, FILL_RECORDS, label="writing data for the report")
        await cluster.wait_converged("report", 3)
        for b in cluster.brokers.values():
            await b.stop()
    finally:
        cluster.close()
    return cluster.root


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    why = report_job_available()
    if why is not None:
        raise Skip(f"needs the Spark report job ({why})")
    source = next((name for name, path in ctx.data_roots.items() if path.exists()), None)
    if source is not None:
        root = ctx.data_roots[source]
    else:
        root = await _fill(ctx)
        source = "its own cluster"
    out = ctx.scenario_dir("report")
    cores = os.cpu_count() or 1
    segment_bytes = dir_bytes(root)
    ctx.step(f"Spark report on {segment_bytes / 1e6:,.0f} MB of segments (local[{cores}])")
    log_path = out / "report.log"
    t0 = time.monotonic()
    proc = spawn(
        [
            sys.executable,
            "-m",
            "spark_jobs.report_job",
            "--data-dir",
            str(root),
            "--out",
            str(out),
            "--master",
            f"local[{cores}]",
        ],
        log_path=log_path,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    try:
        await wait_for(lambda: proc.poll() is not None, 3600, "the report job to finish", interval=0.2)
    finally:
        reap(proc)
    wall = time.monotonic() - t0
    report_path = out / "report.json"
    if proc.returncode not in (0, 1) or not report_path.exists():
        result.details["log_tail"] = tail(log_path, 60)
        last = tail(log_path, 1).strip()
        raise RuntimeError(f"the report job exited with {proc.returncode} ({last}); see details.log_tail")
    report = json.loads(report_path.read_text(encoding="utf-8"))
    inputs = report.get("inputs", {})
    rate = inputs.get("read_mb_per_s")
    mb = inputs.get("segment_bytes", 0) / 1e6
    result.add(
        Figure(
            "segment_read_mb_per_s",
            "(7) report job: segment read rate",
            rate,
            "MB/s",
            ratio=ctx.of_read(rate) if rate else None,
            ratio_to="file read",
            note=f"{mb:,.0f} MB in {inputs.get('read_seconds', 0):.1f}s, local[{cores}]",
        )
    )
    result.add(Figure("report_wall_s", "(7) report job, whole run (JVM start, reads, checks)", wall, "s"))
    result.details = {
        "data_from": source,
        "verdict": report.get("verdict"),
        "exit_code": proc.returncode,
        "inputs": inputs,
        "timings_s": report.get("timings_s"),
    }
