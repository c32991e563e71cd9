"""``isrsim report``: the PySpark consistency report (see ``docs/report.md``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import click

# What the report needs beyond the base install (pyproject's ``report`` extra), by import name.
REPORT_EXTRA_MODULES = ("pyspark", "pyarrow", "numpy", "matplotlib")
REPORT_EXTRA_INSTALL = "pip install 'isrsim[report]'"


def running_nodes(root: Path) -> list[str]:
    """The nodes of the cluster at ``root`` (made by `isrsim cluster up`) whose processes still run."""
    from kit.cluster_files import ClusterError, ClusterInfo
    from kit.processes import process_state

    if not (root / "cluster.json").is_file():
        return []
    try:
        info = ClusterInfo.load(root)
    except ClusterError:
        return []
    out = []
    for kind, entries in (("broker", info.brokers), ("controller", info.controllers)):
        for e in entries:
            if process_state(e.pid) != "stopped" and _is_isrsim(e.pid):
                out.append(f"{kind} {e.id}")
    return out


def _is_isrsim(pid: int | None) -> bool:
    """Whether ``pid`` is still one of isrsim's processes (not a recycled pid); True if unknown."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"cli.main" in cmdline or b"isrsim" in cmdline


def running_warning(root: Path) -> str | None:
    """One line when the cluster at ``root`` still runs: its logs, checkpoints and journals may still
    change while Spark reads them (a follower catching up, a checkpoint rewritten)."""
    running = running_nodes(root)
    if not running:
        return None
    return (
        f"warning: the cluster at {root} is still running ({', '.join(running)}): its data may still move "
        f"while the report reads it (and a follower's HW checkpoint lags until it stops); stop it first "
        f"with `isrsim cluster down --data-dir {root}`"
    )


def require_report_extra(command: str) -> None:
    """Stops ``command`` with one line naming what to install when the report's extra is missing."""
    missing = [name for name in REPORT_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise click.ClickException(
            f"`isrsim {command}` needs the Spark report's packages ({', '.join(missing)} missing): "
            f"{REPORT_EXTRA_INSTALL}"
        )


@click.command("report")
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=Path("isrsim-data"),
    show_default=True,
    envvar="ISRSIM_DATA_DIR",
    help="Cluster root (broker-<id>/, controller/, workload/) or one broker's data directory; or "
    "$ISRSIM_DATA_DIR.",
)
@click.option(
    "--out", type=click.Path(path_type=Path), default=None, help="Report directory [<data-dir>/report]."
)
@click.option(
    "--master",
    default=None,
    help="Spark master URL: local[N], or spark://HOST:PORT for a standalone cluster (the data dir must be "
    "at the same path on every worker) [local[*]; under spark-submit, spark-submit's own --master].",
)
@click.option(
    "--verify-crc/--no-verify-crc", default=True, show_default=True, help="Check every batch's CRC."
)
@click.option(
    "--max-examples", type=int, default=20, show_default=True, help="Violating rows kept per check."
)
@click.option("--max-plots", type=int, default=12, show_default=True, help="Partitions with a timeline.")
@click.option(
    "--min-progress",
    type=click.IntRange(min=1),
    default=None,
    help="Check progress_during_faults: every fault window saw at least N acknowledged records on the "
    "program's partitions that kept a leader and min.insync.replicas [off].",
)
@click.option(
    "--include-internal",
    is_flag=True,
    help="Show the internal topics (__consumer_offsets, __transaction_state) in the plots, lag panels "
    "and fault x partition matrix too.",
)
def report(
    data_dir: Path,
    out: Path | None,
    master: str | None,
    verify_crc: bool,
    max_examples: int,
    max_plots: int,
    min_progress: int | None,
    include_internal: bool,
) -> None:
    """Did the replicas converge, and was anything acknowledged lost or any log diverged?

    Reads every broker's segments, checkpoints and journals with Spark, runs the checks and writes
    report.json and report.html (verdict, faults and time to converge, throughput and latency, replica
    lag, a fault x partition matrix). Spark's own output goes to <out>/spark.log.

    \b
    Exit codes (the verdict, as Jepsen words it):
      0  valid: no check found a violation
      1  invalid: a check found a violation
      2  the input cannot be read (the message names the file)
      3  unknown: no violation, but a check had nothing to examine
         (e.g. no acknowledged batch to look for), or nothing to judge at
         all (no such directory, an empty one, a cluster never written to)

    The summary, its verdict on the first line, goes to stdout; progress to
    stderr.
    """
    require_report_extra("report")
    warning = running_warning(data_dir)
    if warning:
        click.echo(warning, err=True)
    from rich.console import Console

    from spark_jobs.report_job import SessionOwner, run_report

    owner = SessionOwner(master)
    try:
        outcome = run_report(
            owner,
            data_dir,
            out,
            console=Console(stderr=True),
            summary=Console(),
            verify_crc=verify_crc,
            max_examples=max_examples,
            max_plots=max_plots,
            min_progress=min_progress,
            include_internal=include_internal,
        )
    finally:
        owner.close()
    sys.exit(outcome.exit_code)
