"""Named listeners with real processes: a controller and two brokers, each broker with an INTERNAL
listener (inter-broker) and an EXTERNAL one, all on OS-assigned ports. Replication runs over INTERNAL;
METADATA answers with the addresses of the listener a request arrives on; a producer bootstrapped on
EXTERNAL addresses writes with acks=all; a broker started with an unsupported security protocol refuses to
start with one line naming it."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from protocol.api_keys import ApiKeys
from tests.integration.harness import BrokerLauncher, BrokerProcess, python_cmd, request, run_cli, wait_until
from tests.integration.test_controller_process import ControllerProcess

pytestmark = pytest.mark.integration

LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "broker.heartbeat.interval.ms": "300",
}
FAST_HEARTBEAT = {"broker.heartbeat.interval.ms": "300"}


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path / "controller")
    try:
        yield proc
    finally:
        proc.close()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[BrokerLauncher]:
    launcher = BrokerLauncher(tmp_path / "brokers")
    try:
        yield launcher
    finally:
        launcher.close()


def endpoints(broker: BrokerProcess) -> dict[str, int]:
    """Listener name -> port, from the broker's last broker_started line."""
    started = broker.events("broker_started")[-1]
    out: dict[str, int] = {}
    for item in started["listeners"]:
        name, address = item.split("://")
        out[name] = int(address.rsplit(":", 1)[1])
    return out


def test_two_listeners_per_broker(controller: ControllerProcess, launcher: BrokerLauncher) -> None:
    controller.start()
    voters = {"controller.quorum.voters": f"1000@{controller.host}:{controller.port}", "cluster.id": "it"}
    brokers = launcher.start_many([1, 2], {**LISTENERS, **voters})
    ports = {b.broker_id: endpoints(b) for b in brokers}
    for b in brokers:
        assert b.port == ports[b.broker_id]["INTERNAL"]  # broker_started's port: the inter-broker one
        assert ports[b.broker_id]["EXTERNAL"] != b.port

    # Both registered with every listener; the controller knows them by their INTERNAL address.
    def registered() -> dict[int, int] | None:
        body = trio.run(request, controller.host, controller.port, ApiKeys.DESCRIBE_CLUSTER, {})
        found = {b["broker_id"]: b["port"] for b in body["brokers"] if not b["fenced"]}
        return found if len(found) == 2 else None

    assert wait_until(registered, 20, message="both brokers registered") == {
        n: ports[n]["INTERNAL"] for n in (1, 2)
    }
    run_cli(
        "topic", "create", "t", "--partitions", "2", "--replication-factor", "2",
        "--bootstrap-server", f"{controller.host}:{controller.port}",
    )  # fmt: skip

    # METADATA on each listener of broker 1, once UPDATE_METADATA has told it about broker 2.
    def brokers_on(listener: str) -> dict[int, int]:
        body = trio.run(request, "127.0.0.1", ports[1][listener], ApiKeys.METADATA, {"topics": None})
        return {b["node_id"]: b["port"] for b in body["brokers"]}

    wait_until(lambda: len(brokers_on("EXTERNAL")) == 2, 20, message="broker 1 to learn of broker 2")
    assert brokers_on("EXTERNAL") == {n: ports[n]["EXTERNAL"] for n in (1, 2)}
    assert brokers_on("INTERNAL") == {n: ports[n]["INTERNAL"] for n in (1, 2)}

    # A client that knows only the EXTERNAL addresses produces with acks=all: the followers replicate
    # over INTERNAL, or the high watermark would not move.
    external = ",".join(f"127.0.0.1:{ports[n]['EXTERNAL']}" for n in (1, 2))
    out = run_cli(
        "produce", "t", "--count", "2000", "--acks", "all", "--no-progress", "--bootstrap-server", external
    )
    assert "2,000 records acknowledged" in out.stdout

    def isr_full() -> bool:
        body = trio.run(
            request, "127.0.0.1", ports[2]["EXTERNAL"], ApiKeys.METADATA, {"topics": [{"name": "t"}]}
        )
        return all(len(p["isr_nodes"]) == 2 for p in body["topics"][0]["partitions"])

    wait_until(isr_full, 20, message="both replicas in every ISR")


def test_a_tls_listener_without_a_keystore_is_refused_at_start_up(tmp_path: Path) -> None:
    proc = subprocess.run(
        python_cmd(
            "broker", "start", "--id", "1",
            "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", "listeners=SASL_SSL://127.0.0.1:0",
        ),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "ssl.keystore.location is required for SSL and SASL_SSL listeners" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_listener_whose_port_is_taken_stops_start_up_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            python_cmd(
                "broker", "start", "--id", "1",
                "--override", f"log.dirs={tmp_path / 'data'}",
                "--override", f"listeners=INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:{port}",
                "--override", "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
            ),
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert proc.returncode != 0
    assert f"cannot listen on 127.0.0.1:0, 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_broker_is_healthy_only_once_the_controller_has_unfenced_it(
    controller: ControllerProcess, launcher: BrokerLauncher
) -> None:
    """`isrsim health` of a broker (the containers' healthcheck) waits for Kafka's RUNNING state: a broker
    the controller has not registered (here: refused for another cluster.id) is STARTING and not healthy,
    so nothing that waits on the healthcheck tries to place a topic on it."""
    controller.start()
    voters = f"1000@{controller.host}:{controller.port}"
    good = launcher.start(1, {"controller.quorum.voters": voters, "cluster.id": "it", **FAST_HEARTBEAT})
    refused = launcher.start(2, {"controller.quorum.voters": voters, "cluster.id": "other", **FAST_HEARTBEAT})
    wait_until(
        lambda: run_cli("health", good.address, check=False).returncode == 0, 20, message="broker 1 healthy"
    )
    assert "broker 1 RUNNING" in run_cli("health", good.address).stdout
    proc = run_cli("health", refused.address, check=False)
    assert proc.returncode == 1
    assert "is a broker in state STARTING, not RUNNING" in proc.stderr
