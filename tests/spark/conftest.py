"""One local SparkSession for every Spark test, and cluster data made once per session."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.report_job import LOCAL_CONF, ReportOutcome, run_report
from tests.spark.cluster_fixtures import add_kill9_leftovers, make_single_broker_cluster, make_three_replicas


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("isrsim-report-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.memory", "1g")
    )
    for key, value in LOCAL_CONF.items():  # what `isrsim report` sets for a local master
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def single_broker_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real broker's data: produced to, killed with SIGKILL, restarted, produced to, stopped."""
    return make_single_broker_cluster(tmp_path_factory.mktemp("single"))


@pytest.fixture(scope="session")
def three_replica_root(single_broker_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("three") / "cluster"
    shutil.copytree(single_broker_root, root, ignore=shutil.ignore_patterns("report"))
    make_three_replicas(root)
    return root


@pytest.fixture
def cluster_copy(three_replica_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "cluster"
    shutil.copytree(three_replica_root, root, ignore=shutil.ignore_patterns("report"))
    return root


@dataclass
class CleanReport:
    """The report of ``root`` (three replicas with the leftovers of a kill -9 added), written to ``out``."""

    root: Path
    outcome: ReportOutcome
    leftovers: dict[str, Any]
    out: Path


@pytest.fixture(scope="session")
def clean_report(
    spark: Any, three_replica_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> CleanReport:
    """One report of the clean three-replica run for every test that judges it (test_report.py's clean
    tests, and test_standalone.py, which runs the same report on a standalone cluster and compares)."""
    root = tmp_path_factory.mktemp("clean") / "cluster"
    shutil.copytree(three_replica_root, root)
    leftovers = add_kill9_leftovers(root)
    out = tmp_path_factory.mktemp("clean-report")
    console = Console(file=(out / "console.txt").open("w"), width=160)
    outcome = run_report(spark, root, out / "report", console=console, max_plots=3)
    return CleanReport(root, outcome, leftovers, out)
