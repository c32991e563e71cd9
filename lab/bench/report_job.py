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
from typing import Any

from kit.processes import async_wait_until, reap, tail_of
from kit.producer import ProducerSettings
from lab.bench.cluster import BenchCluster, dir_bytes, launch_owned
from lab.bench.context import BenchContext, Skip
from lab.bench.results import Figure, ScenarioResult
from lab.bench.throughput import produce

FILL_RECORDS = 300_000
# The report's exit codes (docs/report.md): each is a verdict on the data, not a failure of the job.
REPORT_VERDICTS = {0: "valid", 1: "invalid", 3: "unknown"}


def report_job_available() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed"
    return None


async def _fill(ctx: BenchContext, name: str = "report-data", records: int = FILL_RECORDS) -> Path:
    """A 3-broker cluster holding ``records`` 100-byte records (RF 3), stopped cleanly."""
    cluster = BenchCluster(ctx.scenario_dir(name), {"min.insync.replicas": "2"})
    try:
        ctx.step("starting 3 brokers to write data for the report")
        await cluster.start([1, 2, 3])
        await cluster.assign("report", 3)
        settings = ProducerSettings(acks=-1, record_size=100, batch_records=1000)
        await produce(ctx, cluster, "report", settings, records, label="writing data for the report")
        await cluster.wait_converged("report", 3)
        for b in cluster.brokers.values():
            await b.stop()
    finally:
        cluster.close()
    return cluster.root


async def _run_job(ctx: BenchContext, root: Path, out: Path) -> tuple[dict[str, Any], float, int]:
    """The report job as its own process on ``root``: its report.json, wall time and exit code."""
    cores = os.cpu_count() or 1
    ctx.step(f"Spark report on {dir_bytes(root) / 1e6:,.0f} MB (local[{cores}])")
    log_path = out / "report.log"
    t0 = time.monotonic()
    proc = launch_owned(
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
        await async_wait_until(
            lambda: proc.poll() is not None, 3600, "the report job to finish", interval=0.2
        )
    finally:
        reap(proc)
    wall = time.monotonic() - t0
    report_path = out / "report.json"
    if proc.returncode not in REPORT_VERDICTS or not report_path.exists():
        last = tail_of(log_path, 1).strip()
        raise RuntimeError(
            f"the report job exited with {proc.returncode} ({last}); log: {log_path}\n{tail_of(log_path, 60)}"
        )
    report: dict[str, Any] = json.loads(report_path.read_text(encoding="utf-8"))
    return report, wall, proc.returncode


def _figures(
    ctx: BenchContext, result: ScenarioResult, label: str, suffix: str, report: dict[str, Any], wall: float
) -> None:
    cores = os.cpu_count() or 1
    inputs = report.get("inputs", {})
    rate = inputs.get("read_mb_per_s")
    mb = inputs.get("segment_bytes", 0) / 1e6
    timings: dict[str, float] = report.get("timings_s", {})
    checks = {k: v for k, v in timings.items() if k.startswith("check: ")}
    slowest = max(checks.items(), key=lambda kv: kv[1], default=("", 0.0))
    result.add(
        Figure(
            f"segment_read_mb_per_s{suffix}",
            f"{label}: segment read rate",
            rate,
            "MB/s",
            ratio=ctx.of_read(rate) if rate else None,
            ratio_to="file read",
            note=f"{mb:,.0f} MB in {inputs.get('read_seconds', 0):.1f}s, local[{cores}]",
        )
    )
    result.add(Figure(f"report_wall_s{suffix}", f"{label}, whole run (JVM start, reads, checks)", wall, "s"))
    if slowest[0]:
        result.add(
            Figure(
                f"report_slowest_check_s{suffix}",
                f"{label}: slowest check",
                slowest[1],
                "s",
                note=slowest[0].removeprefix("check: "),
            )
        )


def _verdict(
    ctx: BenchContext, result: ScenarioResult, label: str, suffix: str, report: dict[str, Any], code: int
) -> None:
    """The report's verdict on the bench's own data, as a figure (its exit code) that names it; a check
    that was not valid is named in a note."""
    verdict = REPORT_VERDICTS[code]
    checks = report.get("checks", [])
    not_valid = [f"{c['name']} {c['verdict']}" for c in checks if c.get("verdict") != "valid"]
    result.add(
        Figure(
            f"report_exit_code{suffix}",
            f"{label}: verdict {verdict.upper()}",
            float(code),
            "exit code",
            note=", ".join(not_valid) or "every check valid",
        )
    )
    if not_valid:
        ctx.note(f"{label}: {verdict}: {', '.join(not_valid)}")


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    why = report_job_available()
    if why is not None:
        raise Skip(f"needs the Spark report job ({why})")
    source = next((name for name, path in ctx.data_roots.items() if path.exists()), None)
    if source is not None:
        root = ctx.data_roots[source]
    else:
        root = await _fill(ctx, records=ctx.params.report_fill_records)
        source = "its own cluster"
    report, wall, code = await _run_job(ctx, root, ctx.scenario_dir("report"))
    _figures(ctx, result, "(7) report job", "", report, wall)
    _verdict(ctx, result, "(7) report job", "", report, code)
    result.details = {
        "data_from": source,
        "verdict": report.get("verdict"),
        "exit_code": code,
        "inputs": report.get("inputs", {}),
        "timings_s": report.get("timings_s"),
    }
    if ctx.params.report_mb:
        # Segment bytes on disk: 3 replicas of ~104 bytes per 100-byte record (its record and batch framing).
        records = int(ctx.params.report_mb * 1e6 / (3 * 104))
        big_root = await _fill(ctx, "report-data-big", records)
        big, big_wall, big_code = await _run_job(ctx, big_root, ctx.scenario_dir("report-big"))
        label = f"(7) report job, --report-mb {ctx.params.report_mb}"
        _figures(ctx, result, label, "_big", big, big_wall)
        _verdict(ctx, result, label, "_big", big, big_code)
        result.details["big"] = {
            "verdict": big.get("verdict"),
            "exit_code": big_code,
            "inputs": big.get("inputs", {}),
            "timings_s": big.get("timings_s"),
        }
