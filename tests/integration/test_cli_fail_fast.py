"""The CLI fails fast and means one thing per flag (issue 39): a cluster that is down or an address where
nothing listens fails in about a second with one line naming what did not answer; a missing topic or
group is said at once; `--print-offsets` keeps `--property print.key=true`; `controller restart` leaves a
running controller alone without --force; `produce --timeout-ms` is the deprecated name of
--request-timeout-ms; `isrsim report` warns about a cluster that still runs."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.report_cmd import running_warning
from kit.processes import process_state
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.harness import REPO_ROOT, python_cmd, run_cli

pytestmark = pytest.mark.integration

ONE_BROKER = ("broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500")
FAST_FAILURE_S = 5.0  # generous: the commands fail in well under 2 s


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("one") / "c"
    for cluster in cluster_up(root, brokers=1, settings=ONE_BROKER):
        cluster.cli("topic", "create", "t", "--partitions", "2", "--replication-factor", "1")
        yield cluster


def _timed(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = run_cli(*args, check=False, timeout=60)
    elapsed = time.monotonic() - t0
    print(f"isrsim {' '.join(args)}: exit {proc.returncode} in {elapsed:.2f} s")
    return proc, elapsed


def _fails_fast(*args: str) -> str:
    """The one ``Error:`` line of a command that must fail (exit 1) within FAST_FAILURE_S."""
    proc, elapsed = _timed(*args)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert elapsed < FAST_FAILURE_S, (elapsed, errors[0])
    return errors[0]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_stopped_cluster_fails_fast_naming_what_did_not_answer(tmp_path: Path) -> None:
    root = tmp_path / "c"
    for cluster in cluster_up(root, brokers=2, settings=ONE_BROKER, controllers=3):
        cluster.cli("topic", "create", "t", "--partitions", "2", "--replication-factor", "2")
        assert running_warning(root) is not None
        cluster.cli("cluster", "down")
        assert running_warning(root) is None
        d = ["--data-dir", str(root)]
        for command in (["topic", "list"], ["topic", "describe", "t"]):
            line = _fails_fast(*command, *d)
            assert line.startswith("Error: no controller answered: ") and "nothing is listening at" in line
            assert "is the cluster up?" in line
        for command in (["produce", "t", "--count", "1", "--no-progress"], ["consume", "t", "-e"]):
            line = _fails_fast(*command, *d)
            assert line.startswith("Error: no broker answered: nothing is listening at"), line
            for b in cluster.info.brokers:
                assert b.address in line


def test_nothing_listening_at_the_bootstrap_address_is_said_so(tmp_path: Path) -> None:
    where = f"127.0.0.1:{_free_port()}"
    line = _fails_fast("topic", "list", "--bootstrap-server", where)
    assert f"nothing is listening at {where} (connection refused)" in line
    assert "controller at" not in line
    for command in (["produce", "t", "--count", "1", "--no-progress"], ["consume", "t", "-e"]):
        line = _fails_fast(*command, "--bootstrap-server", where)
        assert f"no broker answered: nothing is listening at {where} (connection refused)" in line


def test_a_missing_topic_fails_at_once(one: Cluster) -> None:
    d = ["--data-dir", str(one.root)]
    for command in (["produce", "nope", "--count", "1", "--no-progress"], ["consume", "nope", "-e"]):
        line = _fails_fast(*command, *d)
        assert "topic 'nope' does not exist" in line and "isrsim topic create nope" in line


def test_group_describe_of_a_missing_group_exits_2(one: Cluster) -> None:
    proc, elapsed = _timed("group", "describe", "nosuchgroup", "--data-dir", str(one.root))
    assert proc.returncode == 2, proc
    assert elapsed < FAST_FAILURE_S
    assert proc.stderr.strip() == "Error: Consumer group 'nosuchgroup' does not exist."
    assert proc.stdout == ""


def test_print_offsets_keeps_the_properties(one: Cluster) -> None:
    subprocess_input = "k1\tv1\n"
    one.cli("topic", "create", "keyed", "--partitions", "1", "--replication-factor", "1")
    produced = subprocess.run(
        python_cmd("produce", "keyed", "--property", "parse.key=true", "--data-dir", str(one.root)),
        cwd=REPO_ROOT,
        input=subprocess_input,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    args = ["consume", "keyed", "--from-beginning", "-e", "--print-offsets"]
    assert one.cli(*args, "--property", "print.key=true").stdout == "0\t0\tk1\tv1\n"
    assert one.cli(*args).stdout == "0\t0\tv1\n"


def test_controller_restart_of_a_running_controller_needs_force(one: Cluster) -> None:
    pid = one.info.controller.pid
    proc = one.cli("controller", "restart", check=False)
    assert proc.returncode == 1
    assert "is running" in proc.stderr and "--force" in proc.stderr, proc.stderr
    assert one.info.controller.pid == pid and process_state(pid) == "running"


def test_produce_timeout_ms_is_a_deprecated_name_of_request_timeout_ms(one: Cluster) -> None:
    old = one.cli("produce", "t", "--count", "10", "--no-progress", "--timeout-ms", "5000")
    notices = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert len(notices) == 1 and "--request-timeout-ms" in notices[0], old.stderr
    new = one.cli("produce", "t", "--count", "10", "--no-progress", "--request-timeout-ms", "5000")
    assert "deprecated" not in new.stderr
    both = one.cli(
        "produce", "t", "--count", "1", "--timeout-ms", "5000", "--request-timeout-ms", "6000", check=False
    )
    assert both.returncode == 2 and "disagree" in both.stderr
