"""The report on a Spark standalone cluster: a master and two workers started from the pyspark installation
on 127.0.0.1, the job submitted with ``isrsim report --master spark://...``, and its report.json compared
with the session's ``local[2]`` report of the same data (``clean_report``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import CleanReport

pytestmark = pytest.mark.spark

WORKERS = 2
READY_TIMEOUT_S = 180.0
# What may differ between two runs of the same data: when and where it ran, and how long it took.
RUN_SPECIFIC = ("generated_ms", "spark_master", "timings_s")
RUN_SPECIFIC_INPUTS = ("read_seconds", "read_mb_per_s")
# Every JVM here lives for one short job on a shared test machine (see LOCAL_CONF in the report job).
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class Standalone:
    """A master and its workers, each a JVM in its own process group, logs in ``logs``."""

    logs: Path
    master_port: int = field(default_factory=_free_port)
    ui_port: int = field(default_factory=_free_port)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(_spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": SHORT_LIVED_JVM,
            "SPARK_LOG_DIR": str(self.logs),
            "PYSPARK_PYTHON": sys.executable,
        }

    def spawn(self, name: str, args: list[str]) -> None:
        log = (self.logs / f"{name}.log").open("wb")
        cmd = [str(_spark_home() / "bin" / "spark-class"), *args]
        self.procs.append(
            subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True
            )
        )
        log.close()

    def start(self) -> None:
        self.spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        for i in range(WORKERS):
            work = self.logs / f"work-{i}"
            work.mkdir()
            self.spawn(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(_free_port()),
                    "--cores",
                    "1",
                    "--memory",
                    "768m",
                    "--work-dir",
                    str(work),
                ],
            )

    def state(self) -> dict[str, Any] | None:
        """The master's own view (its web UI's JSON), None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as resp:
                state: dict[str, Any] = json.loads(resp.read())
                return state
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def wait_ready(self) -> dict[str, Any]:
        """Until the master is ALIVE with every worker registered; fails at once if a JVM exits."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead:
                pytest.fail(f"a Spark daemon exited: {dead}\n{self.log_tails()}")
            state = self.state()
            if state and state.get("status") == "ALIVE" and state.get("aliveworkers", 0) >= WORKERS:
                return state
            if time.monotonic() > deadline:
                pytest.fail(f"the standalone cluster was not ready in {READY_TIMEOUT_S:.0f}s: {state}")
            time.sleep(0.2)

    def log_tails(self) -> str:
        return "\n".join(
            f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:])
            for p in sorted(self.logs.glob("*.log"))
        )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java is not installed")
    cluster = Standalone(tmp_path_factory.mktemp("standalone"))
    try:
        cluster.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in report.items() if k not in RUN_SPECIFIC}
    out["inputs"] = {k: v for k, v in report["inputs"].items() if k not in RUN_SPECIFIC_INPUTS}
    return out


@pytest.mark.timeout(1200)  # a standalone Spark cluster's start, then the report on it (itself up to 600 s)
def test_report_on_a_standalone_cluster_matches_local(
    standalone: Standalone, clean_report: CleanReport, tmp_path: Path
) -> None:
    """The same data as the session's local report (tests/spark/conftest.py), read again on the cluster."""
    root = clean_report.root
    # Executors get 512m of the workers' 768m; everything else is Spark's default for a cluster.
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.executor.memory 512m\n"
        f"spark.driver.extraJavaOptions {SHORT_LIVED_JVM}\n"
        f"spark.executor.extraJavaOptions {SHORT_LIVED_JVM}\n",
        encoding="utf-8",
    )
    env = {**standalone.env(), "SPARK_CONF_DIR": str(conf_dir)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "report",
            "--data-dir",
            str(root),
            "--out",
            str(tmp_path / "on-cluster"),
            "--master",
            standalone.url,
            "--max-plots",
            "3",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), f"{proc.stderr[-3000:]}\n{standalone.log_tails()}"
    on_cluster = json.loads((tmp_path / "on-cluster" / "report.json").read_text(encoding="utf-8"))
    assert on_cluster["spark_master"] == standalone.url

    # The job ran on the workers: the master saw one application, with executors on both workers.
    state = standalone.state() or {}
    apps = state.get("completedapps", []) + state.get("activeapps", [])
    assert [a["name"] for a in apps] == ["isrsim-report"], apps
    executors = [p for p in (standalone.logs).glob("work-*/app-*/*") if p.is_dir()]
    assert len({p.parent.parent.name for p in executors}) == WORKERS, executors

    local = clean_report.outcome
    assert local.report["verdict"] == "valid"
    assert _comparable(on_cluster) == _comparable(local.report)
