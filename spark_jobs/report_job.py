"""The consistency report job: read every replica's segments, checkpoints and journals, run the checks, and
write ``report.json`` and ``report.html``.

Run it as ``isrsim report --data-dir ROOT`` or ``spark-submit spark_jobs/report_job.py --data-dir ROOT``.
Exit code: 0 valid (no check found a violation), 1 invalid (a check found a
violation), 2 the input cannot be read, 3 unknown (no violation, but a check had nothing to examine).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __name__ == "__main__" and __package__ in (None, ""):
    # spark-submit spark_jobs/report_job.py: make the project importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from spark_jobs.layout import ClusterLayout, InputProblem, discover
from spark_jobs.result import SCHEMA_VERSION

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_UNREADABLE = 2
EXIT_UNKNOWN = 3
EXIT_CODES = {"valid": EXIT_OK, "invalid": EXIT_FAILED, "unknown": EXIT_UNKNOWN}
PROGRESS_LINE_S = 2.0  # a progress line at most this often where the console is not a terminal
SHIPPED_PACKAGES = ("protocol", "broker", "spark_jobs")
# A local report is one short-lived JVM planning many small queries over metadata-sized inputs (see
# docs/performance.md): the JIT's optimising tier costs more CPU than it ever wins back in such a run, and
# adaptive execution re-plans every shuffle of data that fits in one task. A cluster keeps Spark's defaults.
LOCAL_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.sql.adaptive.enabled": "false",
}


@dataclass
class ReportOutcome:
    exit_code: int
    report: dict[str, Any]
    out_dir: Path
    problems: list[InputProblem] = field(default_factory=list)
    figures: Any = None  # spark_jobs.figures.FigureData: the data series behind the plots


def _is_local(master: str) -> bool:
    """``local``/``local[n]``: one JVM and this machine's Python (``local-cluster`` has real executors)."""
    return master == "local" or master.startswith("local[")


def build_session(master: str | None = None, app_name: str = "isrsim-report") -> Any:
    """A SparkSession on ``master``; default ``local[*]``, or spark-submit's master when run under it."""
    from pyspark.sql import SparkSession

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if master is None and not under_submit:
        master = "local[*]"
    local = master is not None and _is_local(master)
    if local:
        # Local Python workers must use this interpreter (the one with the project installed), and a local
        # job has no reason to listen anywhere but loopback.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    if local:
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
        builder = builder.config("spark.ui.enabled", "false")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    if master is not None:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    if not sc.getConf().contains("spark.sql.shuffle.partitions"):
        # The inputs are small (metadata, not records): Spark's default of 200 shuffle partitions is all
        # task overhead, on one machine and on a cluster alike; one per core is plenty.
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, sc.defaultParallelism)))
    if not sc.getConf().contains("spark.sql.adaptive.enabled"):
        # Nor is there anything for adaptive execution to re-plan: it would only run every shuffle stage as
        # a job of its own.
        spark.conf.set("spark.sql.adaptive.enabled", "false")
    if not _is_local(spark.sparkContext.master):
        ship_code(spark)
    return spark


def ship_code(spark: Any) -> None:
    """Send the project's packages to the executors (``addPyFile``), so the data sources import there.
    The executors still need the third-party modules the readers use (numpy, pyarrow, crc32c; for record
    contents also cramjam, zstandard and aiokafka): ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) names
    an interpreter that has them on every worker."""
    import importlib

    tmp = Path(tempfile.mkdtemp(prefix="isrsim-report-"))
    archive = tmp / "isrsim-code.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name in SHIPPED_PACKAGES:
            pkg = Path(importlib.import_module(name).__file__ or "").parent
            for path in pkg.rglob("*.py"):
                z.write(path, Path(name) / path.relative_to(pkg))
    spark.sparkContext.addPyFile(str(archive))


class Phases:
    """A rich status line per phase, and how long each took."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.timings: dict[str, float] = {}
        self.spark: Any = None
        self.jobs: dict[str, int] = {}
        self._status: Any = None
        self._name = ""
        self._printed = 0.0

    def _still_running(self, name: str) -> None:
        """A line for a phase still running (unless a progress line of it was just printed)."""
        recent = time.monotonic() - self._printed < PROGRESS_LINE_S
        if self._name == name and self._status is not None and not recent:
            self._printed = time.monotonic()
            self.console.print(f"[dim]{name} ...[/]", highlight=False)

    def update(self, detail: str) -> None:
        """More on the running phase's status line (e.g. files and bytes read so far); where the console
        is not a terminal (a CI log), a line at most every 2 s."""
        if self._status is None:
            return
        self._status.update(f"[bold]report[/] {self._name} ... {detail}")
        now = time.monotonic()
        if not self.console.is_terminal and now - self._printed >= PROGRESS_LINE_S:
            self._printed = now
            self.console.print(f"[dim]{self._name}: {detail}[/]", highlight=False)

    def _job_count(self) -> int:
        if self.spark is None:
            return 0
        return len(self.spark.sparkContext.statusTracker().getJobIdsForGroup(None))

    def record(self, name: str, seconds: float) -> None:
        """A phase timed by the caller (one that may end the run before anything is shown)."""
        self.timings[name] = round(seconds, 3)
        self.jobs[name] = 0
        self.console.print(f"[dim]{name}: {seconds:.1f}s[/]")

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        jobs0 = self._job_count()
        self._name = name
        self._printed = t0
        # Where no status line is drawn (not a terminal), a phase still running after 2 s says so.
        still = None
        if not self.console.is_terminal:
            still = threading.Timer(PROGRESS_LINE_S, self._still_running, (name,))
            still.daemon = True
            still.start()
        with self.console.status(f"[bold]report[/] {name} ...") as status:
            self._status = status
            try:
                yield
            finally:
                self._status = None
                if still is not None:
                    still.cancel()
        self.timings[name] = round(time.monotonic() - t0, 3)
        self.jobs[name] = self._job_count() - jobs0
        jobs = f", {self.jobs[name]} Spark job(s)" if self.jobs[name] else ""
        self.console.print(f"[dim]{name}: {self.timings[name]:.1f}s{jobs}[/]")


def run_report(
    spark: Any,
    data_dir: Path,
    out_dir: Path | None = None,
    *,
    console: Console | None = None,
    summary: Console | None = None,
    verify_crc: bool = True,
    max_examples: int = 20,
    max_plots: int = 12,
    min_progress: int | None = None,
    include_internal: bool = False,
) -> ReportOutcome:
    """Run every check on the cluster root ``data_dir`` and write the report into ``out_dir``.

    ``spark`` is a SparkSession or a function that makes one (called only once the files are found, so a
    wrong ``data_dir``, or one with nothing to judge, is reported without starting Spark). Progress goes to
    ``console`` (default: stderr), the summary, verdict first, to ``summary`` (default: ``console`` when
    one is given, else stdout)."""
    from spark_jobs import (
        checks,
        compaction_checks,
        consumer_checks,
        group_checks,
        journal_checks,
        quorum_checks,
        txn_checks,
    )
    from spark_jobs.inputs import load_inputs
    from spark_jobs.render import (
        nothing_report,
        render_terminal,
        unreadable_report,
        write_html,
        write_json,
    )

    if summary is None:
        summary = console if console is not None else Console()
    console = console or Console(stderr=True)
    out = Path(out_dir) if out_dir is not None else Path(data_dir) / "report"
    phases = Phases(console)
    started = time.time()
    t_find = time.monotonic()
    layout = discover(data_dir)
    reason = nothing_to_judge(Path(data_dir), layout)
    if reason is not None:
        return _nothing(summary, data_dir, out, reason, bool(layout.brokers), nothing_report, write_json)
    phases.record("finding files", time.monotonic() - t_find)
    if layout.problems:
        return _unreadable(console, data_dir, out, layout.problems, unreadable_report, write_json)
    if callable(spark):
        from spark_jobs.quiet import spark_output_to

        with phases.phase("starting Spark"), spark_output_to(out / "spark.log"):
            spark = spark()
    phases.spark = spark
    total_files, total_mb = len(layout.segments), layout.segment_bytes / 1e6

    def read_progress(files: int, done: int) -> None:
        phases.update(f"{files}/{total_files} files, {done / 1e6:.1f}/{total_mb:.1f} MB")

    with phases.phase(f"reading {total_mb:.1f} MB of segments, checkpoints and journals"):
        inputs = load_inputs(spark, layout, verify_crc=verify_crc, progress=read_progress)
    s = inputs.stats
    console.print(
        f"read {s.segment_bytes:,} bytes of segments ({s.segment_files} files, {s.batches:,} batches) in "
        f"{s.seconds:.2f}s: {s.mb_per_s:.1f} MB/s"
    )
    if inputs.problems:
        return _unreadable(console, data_dir, out, inputs.problems, unreadable_report, write_json)
    steps: list[Callable[..., Any]] = [
        checks.check_convergence,
        checks.check_log_matching,
        checks.check_acked,
        checks.check_contiguous,
        journal_checks.check_leader_hw,
        checks.check_epoch_cache,
        journal_checks.check_unclean_elections,
        quorum_checks.check_one_leader_per_epoch,
        quorum_checks.check_metadata_log_matching,
        quorum_checks.check_no_stale_controller_obeyed,
        checks.check_batches_intact,
        checks.check_no_duplicates,
        group_checks.check_committed_offsets_not_lost,
        group_checks.check_committed_offsets_below_hw,
        compaction_checks.check_compaction_kept_latest,
        txn_checks.check_transactions_atomic,
        txn_checks.check_read_committed_isolated,
        txn_checks.check_no_hanging_transactions,
        consumer_checks.check_consumer_no_skip,
        consumer_checks.check_consumer_redelivery,
    ]
    results = []
    for step in steps:
        name = step.__name__.removeprefix("check_").replace("_", " ")
        with phases.phase(f"check: {name}"):
            results.append(step(inputs, max_examples))
    if not verify_crc:
        intact = next(r for r in results if r.name == "batches_intact")
        intact.notes.append("CRCs were not verified (--no-verify-crc)")
    from spark_jobs.fault_log import fault_bands, read_fault_log
    from spark_jobs.figures import build_story
    from spark_jobs.result import overall_verdict
    from spark_jobs.timeline import draw_lag, draw_overview

    bands = fault_bands(read_fault_log(Path(data_dir)))
    with phases.phase("time to converge, fault windows"):
        story = build_story(inputs, bands, max_plots, include_internal)
    with phases.phase("availability: stalls and their causes; clients"):
        availability, clients = measure_availability(spark, inputs, story)
    with phases.phase("writes in flight during faults"):
        from spark_jobs.converge import final_stop_ms
        from spark_jobs.fault_overlap import writes_during_faults

        in_flight = writes_during_faults(inputs.acknowledged, story.windows, final_stop_ms(story.events))
    if min_progress is not None:
        from spark_jobs.progress_check import check_progress_during_faults

        with phases.phase("check: progress during faults"):
            results.append(
                check_progress_during_faults(inputs, story.events, story.windows, min_progress, max_examples)
            )
    conv = next((r for r in results if r.name == "convergence"), None)
    if conv is not None:
        conv.extra["time_to_converge"] = story.per_partition
    with phases.phase("drawing plots"):
        figures = {"overview": draw_overview(story.figures)}
        for name in story.figures.lag:
            figures[f"lag:{name}"] = draw_lag(story.figures, name)
    plotted_note = story.plotted_note
    verdicts = [r.verdict for r in results]
    verdict = overall_verdict(verdicts)
    report: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict,
        "verdict_counts": {v: verdicts.count(v) for v in ("valid", "invalid", "unknown")},
        "data_dir": str(data_dir),
        "generated_ms": int(started * 1000),
        "t0_ms": story.figures.t0_ms,
        "t0_source": story.figures.t0_source,
        "spark_master": spark.sparkContext.master,
        "inputs": {
            "brokers": inputs.layout.broker_ids(),
            "partitions": len(inputs.layout.partition_names()),
            "max_replicas_per_partition": inputs.max_replicas,
            "segment_files": s.segment_files,
            "segment_bytes": s.segment_bytes,
            "batches": s.batches,
            "read_seconds": round(s.seconds, 3),
            "read_mb_per_s": round(s.mb_per_s, 2),
            "torn_tail_bytes": s.torn_tail_bytes,
            "journal_files": len(inputs.layout.broker_journals) + len(inputs.layout.controller_journals),
            "journal_lines": s.journal_lines,
            "torn_journal_lines": s.torn_journal_lines,
            "acked_files": len(inputs.layout.acked_journals),
            "acked_lines": s.acked_lines,
            "torn_acked_lines": s.torn_acked_lines,
            "broker_acked_files": len(inputs.layout.broker_acked_journals),
            "broker_acked_lines": s.broker_acked_lines,
            "torn_broker_acked_lines": s.torn_broker_acked_lines,
            "notes": inputs.notes + ([plotted_note] if plotted_note else []),
        },
        "checks": [r.as_dict() for r in results],
        "faults": [b.as_dict(story.figures.t0_ms) for b in bands],
        "fault_windows": story.figures.windows,
        "time_to_converge": {"overall": story.overall, "per_fault": story.per_fault},
        "fault_matrix": story.figures.matrix,
        "availability": availability,
        "clients": clients,
        "writes_during_faults": in_flight,
        "timings_s": phases.timings,
    }
    with phases.phase("writing report"):
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "report.json", report)
        write_html(out / "report.html", report, figures)
    render_terminal(summary, report, out)
    return ReportOutcome(EXIT_CODES[verdict], report, out, figures=story.figures)


def measure_availability(spark: Any, inputs: Any, story: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``report.json``'s ``availability`` (``spark_jobs.availability``; the stalls also go on the plot) and
    ``clients`` (``spark_jobs.clients``): a gap with no cause in the journals is idle time, not a stall."""
    from pyspark.sql import functions as F

    from spark_jobs.availability import (
        Stall,
        classify,
        idle_row,
        stall_candidates,
        summarise,
        workload_attempts,
    )
    from spark_jobs.clients import clients_table, error_marks, read_activity, split_idle
    from spark_jobs.plan import collect_tables

    summaries, failed = workload_attempts(spark, inputs.layout.attempt_journals)
    starts = [int(s["started_ms"]) for s in summaries if s.get("started_ms") is not None]
    acknowledged = inputs.acknowledged
    # A batch a workload summary already counts: journaled by an `isrsim produce` run that wrote one.
    summarised = sorted({str(s["producer_id"]) for s in summaries if s.get("producer_id") is not None})
    covered = F.array_contains("acked_by", "workload") & (
        F.col("producer_id").isin(*summarised) if summarised else F.lit(False)
    )
    # ... or by a Kafka client workload (librdkafka in the demo and chaos) whose summary names its client.id:
    # only the leaders journal its batches, under that client id (``producer_id`` holds it then).
    clients = sorted({str(s["client_id"]) for s in summaries if s.get("client_id")})
    if clients:
        covered = covered | (
            ~F.array_contains("acked_by", "workload")
            & F.coalesce(F.col("producer_id").isin(*clients), F.lit(False))
        )
    activity = read_activity(spark, inputs.layout.activity_journals)
    got = collect_tables(
        {
            "errors": error_marks(activity),
            "stalls": stall_candidates(acknowledged, failed, min(starts) if starts else None),
            "records": acknowledged.agg(
                F.sum(F.col("last_offset") - F.col("base_offset") + 1).alias("n"),
                F.sum(F.when(~covered, F.col("last_offset") - F.col("base_offset") + 1)).alias("others"),
            ),
        }
    )
    records = int((got["records"][0]["n"] if got["records"] else 0) or 0)
    others = int((got["records"][0]["others"] if got["records"] else 0) or 0)
    stalls = [
        classify(
            Stall(r["topic"], int(r["partition"]), int(r["from_ms"]), int(r["to_ms"])),
            story.events,
            story.windows,
        )
        for r in got["stalls"]
    ]
    errors = [(str(r["topic"]), int(r["partition"]), int(r["ts_ms"])) for r in got["errors"]]
    stalls, idle = split_idle(stalls, story.windows, errors)
    result = summarise(summaries, records, stalls, story.figures.t0_ms, others)
    result["idle"] = [idle_row(s, story.figures.t0_ms) for s in sorted(idle, key=lambda s: s.from_ms)]
    story.figures.stalls = result["stalls"]
    return result, clients_table(activity, acknowledged, stalls)


def nothing_to_judge(root: Path, layout: ClusterLayout) -> str | None:
    """Why there is nothing to judge under ``root``, or None if there is: no directory, an empty one, or a
    cluster that never held a record batch and has no acknowledged batch to look for (``cluster up`` then
    ``cluster down``)."""
    if not root.exists():
        return f"{root} does not exist"
    if root.is_dir() and all(p.name == "report" for p in root.iterdir()):
        return f"{root} is empty"  # (but for an earlier run's report/)
    if layout.problems or not layout.brokers:
        return None
    acked = [*layout.acked_journals, *layout.broker_acked_journals]
    if layout.segment_bytes == 0 and not any(_size(p) for p in acked):
        return f"{root} holds no record batch and no acknowledged batch (nothing was written to it)"
    return None


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _nothing(
    summary: Console,
    data_dir: Path,
    out: Path,
    reason: str,
    layout_found: bool,
    nothing_report: Callable[..., dict[str, Any]],
    write_json: Callable[[Path, dict[str, Any]], None],
) -> ReportOutcome:
    """Exit 3 (unknown) with one line: nothing was examined, so there is no evidence either way."""
    report = nothing_report(data_dir, reason)
    summary.print(f"isrsim report: UNKNOWN; nothing to judge: {reason}", soft_wrap=True, highlight=False)
    if layout_found:  # a cluster root: report.json says the same (a missing or empty directory is left so)
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_json(out / "report.json", report)
        except OSError:
            pass  # the line above said all there is to say
    return ReportOutcome(EXIT_UNKNOWN, report, out)


def _unreadable(
    console: Console,
    data_dir: Path,
    out: Path,
    problems: list[InputProblem],
    unreadable_report: Callable[..., dict[str, Any]],
    write_json: Callable[[Path, dict[str, Any]], None],
) -> ReportOutcome:
    report = unreadable_report(data_dir, problems)
    for p in problems:
        console.print(f"[bold red]cannot read[/] {p.path}: {p.problem}")
    if not Path(data_dir).is_dir() and not out.parent.is_dir():
        return ReportOutcome(EXIT_UNREADABLE, report, out, problems)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "report.json", report)
    except OSError as exc:
        console.print(f"cannot write {out / 'report.json'}: {exc}")
    return ReportOutcome(EXIT_UNREADABLE, report, out, problems)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="report_job.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    p.add_argument(
        "--data-dir", type=Path, default=Path("isrsim-data"), help="cluster root (default ./isrsim-data)"
    )
    p.add_argument("--out", type=Path, default=None, help="report directory (default <data-dir>/report)")
    p.add_argument("--master", default=None, help="Spark master (default local[*], or spark-submit's)")
    p.add_argument("--no-verify-crc", action="store_true", help="read headers only, skip CRC checks")
    p.add_argument("--max-examples", type=int, default=20)
    p.add_argument("--min-progress", type=int, default=None, help="progress_during_faults: records per fault")
    p.add_argument("--include-internal", action="store_true", help="plot internal topics too")
    return p.parse_args(argv)


class SessionOwner:
    """Makes the session on first call and stops it at the end, unless one was already running (a caller's
    session, e.g. in tests, is left alone)."""

    def __init__(self, master: str | None) -> None:
        self.master = master
        self.session: Any = None
        self.owned = False

    def __call__(self) -> Any:
        from pyspark.sql import SparkSession

        self.owned = SparkSession.getActiveSession() is None
        self.session = build_session(self.master)
        return self.session

    def close(self) -> None:
        if self.session is not None and self.owned:
            self.session.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    owner = SessionOwner(args.master)
    try:
        outcome = run_report(
            owner,
            args.data_dir,
            args.out,
            verify_crc=not args.no_verify_crc,
            max_examples=args.max_examples,
            min_progress=args.min_progress,
            include_internal=args.include_internal,
        )
    finally:
        owner.close()
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
