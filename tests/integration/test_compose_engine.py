"""docker-compose.yml and docker-compose.secure.yml on a real engine (`make compose-test`, docs/docker.md):
the images are built beforehand (docker/compose-test.sh), then each variant is run through as a user would:
up and healthy, a topic, acks=all records produced and consumed from the `client` service and from the
host, a broker killed and started again (its ISR shrinks, then expands), a broker paused and unpaused (a
zombie leader), `docker compose stop`, the `report` service's verdict, and `down -v`.

Marked `compose`: deselected from `make test` (no engine there), run by `make compose-test`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.integration.harness import REPO_ROOT, python_cmd, wait_until

pytestmark = pytest.mark.compose

PLAIN = ("docker-compose.yml",)
SECURE = ("docker-compose.yml", "docker-compose.secure.yml")
# The host's addresses of the brokers' EXTERNAL listeners (published ports).
HOST_BOOTSTRAP = "localhost:19091,localhost:19092,localhost:19093"
INTERNAL_BOOTSTRAP = "broker-1:19092,broker-2:19092,broker-3:19092"
# The controller quorum's voters, in the network; on the host, published on 9093-9095.
CONTROLLERS = "controller-1:9093,controller-2:9093,controller-3:9093"
NODES = ("controller-1", "controller-2", "controller-3", "broker-1", "broker-2", "broker-3")


class Compose:
    """`docker compose -p PROJECT -f ... COMMAND` in the repository, with the project's own environment."""

    def __init__(self, project: str, files: tuple[str, ...], host_workload: Path) -> None:
        self.project = project
        self.files = files
        self.env = {**os.environ, "ISRSIM_HOST_WORKLOAD": str(host_workload)}

    def argv(self, *args: str) -> list[str]:
        argv = ["docker", "compose", "-p", self.project]
        for f in self.files:
            argv += ["-f", str(REPO_ROOT / f)]
        return [*argv, *args]

    def __call__(
        self, *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(*args), cwd=REPO_ROOT, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)} exited with {proc.returncode}\n"
                f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
            )
        return proc

    def client(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """`docker compose run --rm client ARGS...` (isrsim's arguments: the entrypoint is isrsim)."""
        return self("run", "--rm", "-T", "client", *args, timeout=timeout)

    def cat(self, service: str, path: str) -> str:
        """A file as the service sees it (its volumes mounted), through a throwaway container."""
        return self("run", "--rm", "-T", "--no-deps", "--entrypoint", "cat", service, path).stdout

    def state(self, service: str) -> str:
        out = self("ps", "-a", "--format", "json", service).stdout
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(rows) == 1 and isinstance(rows[0], list):  # older Compose v2: one JSON array
            rows = rows[0]
        return f"{rows[0]['State']} {rows[0].get('Health', '')}".strip() if rows else "absent"

    def down(self) -> None:
        self("--profile", "tools", "--profile", "report", "down", "-v", "--remove-orphans", "-t", "5",
             timeout=180, check=False)  # fmt: skip


def host_isrsim(
    *args: str, cwd: Path, command_config: Path | None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`isrsim ARGS...` on the host (this interpreter's), as a client outside the compose network."""
    extra = ["--command-config", str(command_config)] if command_config else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("ISRSIM_")}
    proc = subprocess.run(
        python_cmd(*args, *extra), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"isrsim {' '.join(args)}: {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


def active_controller(command_config: Path | None) -> str | None:
    """The service of the quorum's leader, as the voters answer DESCRIBE_QUORUM from the host."""
    from kit.client_security import apply_client_security
    from kit.controller_quorum import Voter, describe_quorum, leader_of
    from protocol import current_client_security

    token = current_client_security.set(None)
    try:
        if command_config is not None:
            apply_client_security(None, command_config)
        views = trio.run(describe_quorum, [Voter(None, "localhost", 9093 + n) for n in range(3)])
    finally:
        current_client_security.reset(token)
    leader = leader_of(views)
    return None if leader is None else f"controller-{leader.voter.port - 9092}"


def processed(stderr: str) -> int:
    m = re.search(r"Processed a total of ([\d,]+) messages", stderr)
    assert m, stderr
    return int(m.group(1).replace(",", ""))


def acknowledged(output: str) -> int:
    m = re.search(r"([\d,]+) records acknowledged", output)
    assert m, output
    return int(m.group(1).replace(",", ""))


@pytest.fixture(params=[PLAIN, SECURE], ids=["plain", "secure"])
def compose(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Compose]:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine answers: run `make compose-test`, which installs and starts one")
    files: tuple[str, ...] = request.param
    name = "secure" if files == SECURE else "plain"
    c = Compose(f"isrsim-test-{name}", files, tmp_path / "isrsim-data" / "workload")
    c.down()  # whatever an interrupted run left
    try:
        yield c
    finally:
        if c("ps", "-a", "-q", check=False).stdout.strip():  # a failure left containers: show their end
            print(c("logs", "--no-color", "--tail", "40", check=False).stdout[-12000:])
        c.down()


@pytest.mark.timeout(900)
def test_compose_cluster_on_a_real_engine(compose: Compose, tmp_path: Path) -> None:
    secure = "docker-compose.secure.yml" in compose.files
    t0 = time.monotonic()
    compose("up", "-d", "--wait", "--wait-timeout", "240", timeout=300)
    for service in NODES:
        assert compose.state(service) == "running healthy", service
    print(f"up and healthy in {time.monotonic() - t0:.1f}s")
    if secure:
        # The nodes and the client see the CA's certificate, never its key.
        listing = compose("run", "--rm", "-T", "--no-deps", "--entrypoint", "ls", "client", "-R",
                          "/var/lib/isrsim/secrets").stdout  # fmt: skip
        assert "ca.pem" in listing and "ca-key.pem" not in listing

    # A client on the host: for the secure variant, the CA and client.properties copied out.
    command_config: Path | None = None
    if secure:
        ca = tmp_path / "ca.pem"
        ca.write_text(compose.cat("client", "/var/lib/isrsim/secrets/security/ca.pem"))
        props = compose.cat("client", "/var/lib/isrsim/secrets/client.properties")
        command_config = tmp_path / "client.properties"
        command_config.write_text(re.sub(r"(?m)^ssl\.ca\.location=.*$", f"ssl.ca.location={ca}", props))

    def status() -> dict[str, Any]:
        out = host_isrsim("cluster", "status", "--bootstrap-server", HOST_BOOTSTRAP, "-o", "json",
                          cwd=tmp_path, command_config=command_config).stdout  # fmt: skip
        return dict(json.loads(out))

    def isr_sizes() -> list[int]:
        return [len(p["isr"]) for p in status()["partitions"] if p["topic"] == "c"]

    created = compose.client(
        "topic", "create", "c", "--partitions", "3", "--replication-factor", "3",
        "--bootstrap-server", CONTROLLERS,
    )  # fmt: skip
    assert "created topic c" in created.stdout
    produced = 0
    runs = 0  # producer runs, each with a journal of its own

    def produce_in_network(count: int, topic: str = "c") -> None:
        nonlocal produced, runs
        out = compose.client("produce", topic, "--count", str(count), "--acks", "all", "--no-progress",
                             "--bootstrap-server", INTERNAL_BOOTSTRAP).stdout  # fmt: skip
        assert acknowledged(out) == count
        produced += count if topic == "c" else 0
        runs += 1

    def produce_from_host(count: int) -> None:
        nonlocal produced, runs
        # No --acked-journal: the default ./isrsim-data/workload, which the report mounts
        # (ISRSIM_HOST_WORKLOAD).
        out = host_isrsim(
            "produce", "c", "--count", str(count), "--acks", "all", "--no-progress",
            "--bootstrap-server", HOST_BOOTSTRAP, cwd=tmp_path, command_config=command_config,
        ).stdout  # fmt: skip
        assert acknowledged(out) == count
        produced += count
        runs += 1

    produce_in_network(5_000)
    produce_from_host(2_000)
    assert list((tmp_path / "isrsim-data" / "workload").glob("acked-*.jsonl")), "the host producer's journal"

    read_all = ("consume", "c", "--from-beginning", "--exit-at-end", "--count-only", "--bootstrap-server")

    def consumed_in_network() -> int:
        return processed(compose.client(*read_all, INTERNAL_BOOTSTRAP).stderr)

    def consumed_from_host() -> int:
        proc = host_isrsim(*read_all, HOST_BOOTSTRAP, cwd=tmp_path, command_config=command_config)
        return processed(proc.stderr)

    assert consumed_in_network() == produced == 7_000
    assert consumed_from_host() == produced

    # A broker crashes (SIGKILL): it leaves every ISR; records still go in with acks=all (min ISR 2).
    compose("kill", "broker-2")
    wait_until(lambda: isr_sizes() == [2, 2, 2], timeout=60, interval=1, message="broker-2 out of every ISR")
    produce_in_network(3_000)
    compose("start", "broker-2")
    compose("up", "-d", "--wait", "--wait-timeout", "120", timeout=180)
    wait_until(lambda: isr_sizes() == [3, 3, 3], timeout=90, interval=1, message="broker-2 back in every ISR")

    # A zombie: broker-1 frozen (SIGSTOP) is fenced, its leaderships move, records still go in; thawed, it
    # truncates, catches up and rejoins.
    compose("pause", "broker-1")
    assert compose.state("broker-1").startswith("paused")
    wait_until(lambda: isr_sizes() == [2, 2, 2], timeout=60, interval=1, message="broker-1 out of ISRs")
    produce_in_network(1_000)
    compose("unpause", "broker-1")
    wait_until(lambda: isr_sizes() == [3, 3, 3], timeout=90, interval=1, message="broker-1 back in every ISR")
    assert consumed_in_network() == produced == 11_000

    # The active controller crashes: another voter takes over; a topic is created and written through it;
    # started again, the old one rejoins the quorum as a follower.
    leader = active_controller(command_config)
    assert leader is not None, "no quorum leader"
    compose("kill", leader)
    wait_until(lambda: active_controller(command_config) not in (None, leader), timeout=60, interval=1,
               message=f"a new quorum leader after {leader}")  # fmt: skip
    created = compose.client(
        "topic", "create", "d", "--partitions", "3", "--replication-factor", "3",
        "--bootstrap-server", CONTROLLERS,
    )  # fmt: skip
    assert "created topic d" in created.stdout
    produce_in_network(1_000, topic="d")
    compose("start", leader)
    compose("up", "-d", "--wait", "--wait-timeout", "120", timeout=180)
    wait_until(lambda: active_controller(command_config) is not None, timeout=60, interval=1,
               message="a quorum leader with every voter back")  # fmt: skip

    # Stop: SIGTERM reaches every node (process 1, exec form), each stops cleanly and soon.
    t_stop = time.monotonic()
    compose("stop", timeout=120)
    stop_s = time.monotonic() - t_stop
    print(f"docker compose stop took {stop_s:.1f}s")
    for service in NODES:
        assert compose.state(service).startswith("exited"), service
        if service.startswith("broker-"):
            assert "stopped cleanly" in compose("logs", "--no-color", service).stdout, service
    assert stop_s < 25, f"docker compose stop took {stop_s:.1f}s"

    # The report over every volume and the host producer's journal.
    t_report = time.monotonic()
    compose("--profile", "report", "run", "--rm", "-T", "report", timeout=600)
    print(f"report in {time.monotonic() - t_report:.1f}s")
    report = json.loads(compose.cat("report", "/var/lib/isrsim/report/report.json"))
    failed = [c for c in report["checks"] if not c["passed"]]
    assert report["verdict"] == "valid", failed
    assert report["inputs"]["brokers"] == [1, 2, 3]
    # The three voters' journals: the quorum checks (one leader per epoch ...) judged them.
    assert report["inputs"]["journal_files"] == 6, report["inputs"]
    # Every producer run's journal read: the client's, on the `workload` volume, and the host's.
    assert report["inputs"]["acked_files"] == runs == 5, report["inputs"]
    print(f"{compose.project}: {time.monotonic() - t0:.1f}s in all")

    compose.down()
    left = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"label=com.docker.compose.project={compose.project}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert left == [], f"down -v left volumes: {left}"
