"""docker-compose.yml, checked without a Docker engine (none runs on the machines this suite runs on): each
service's `command` runs as a local process with its `environment`, service names mapped to 127.0.0.1, every
container port remapped to a free local port and every volume to a temporary directory; the healthchecks
run the same way. The processes must form a working cluster: a topic is created, records are produced with
acks=all, a broker is killed (`docker compose kill`) and started again (`docker compose start`)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from protocol.api_keys import ApiKeys
from tests.integration.harness import REPO_ROOT, request, wait_until

pytestmark = pytest.mark.integration

COMPOSE = REPO_ROOT / "docker-compose.yml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCompose:
    """Runs compose services as local processes."""

    def __init__(self, spec: dict[str, Any], root: Path) -> None:
        self.spec = spec
        self.services: dict[str, dict[str, Any]] = isrsim_services(spec)
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # (service, container port) -> local port, for every port a service listens on.
        self.ports: dict[tuple[str, int], int] = {}
        # service -> local port of its /metrics (ISRSIM_METRICS_PORT).
        self.metrics_ports: dict[str, int] = {}
        for name, svc in self.services.items():
            for value in svc.get("environment", {}).values():
                for m in re.finditer(r"://0\.0\.0\.0:(\d+)", str(value)):
                    self.ports.setdefault((name, int(m.group(1))), free_port())
            if "ISRSIM_METRICS_PORT" in svc.get("environment", {}):
                self.metrics_ports[name] = free_port()

    def _local(self, service: str, value: str) -> str:
        def listen(m: re.Match[str]) -> str:
            return f"://127.0.0.1:{self.ports[(service, int(m.group(1)))]}"

        value = re.sub(r"://0\.0\.0\.0:(\d+)", listen, value)
        for (other, port), local in self.ports.items():
            value = value.replace(f"{other}:{port}", f"127.0.0.1:{local}")
        for volume in self.services[service].get("volumes", []):
            target = volume.split(":", 1)[1]
            value = value.replace(target, str(self.root / service))
        return value

    def _argv(self, argv: list[str]) -> list[str]:
        assert argv[0] == "isrsim", argv
        return [sys.executable, "-m", "cli.main", *argv[1:]]

    def start(self, service: str) -> None:
        svc = self.services[service]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ISRSIM_")}
        env.update({k: self._local(service, str(v)) for k, v in svc.get("environment", {}).items()})
        if service in self.metrics_ports:
            env["ISRSIM_METRICS_PORT"] = str(self.metrics_ports[service])
        (self.root / service).mkdir(parents=True, exist_ok=True)
        log = open(self.root / f"{service}.log", "ab")  # noqa: SIM115 - closed with the process
        self.procs[service] = subprocess.Popen(
            self._argv(svc["command"]), env=env, cwd=REPO_ROOT, stdout=log, stderr=log
        )

    def healthy(self, service: str) -> bool:
        test = self.services[service]["healthcheck"]["test"]
        assert test[0] == "CMD"
        argv = [self._local(service, a) for a in test[1:]]
        for (svc, port), local in self.ports.items():
            if svc == service:
                argv = [a.replace(f"127.0.0.1:{port}", f"127.0.0.1:{local}") for a in argv]
        return (
            subprocess.run(self._argv(argv), cwd=REPO_ROOT, capture_output=True, timeout=30).returncode == 0
        )

    def address(self, service: str) -> tuple[str, int]:
        port = next(local for (svc, _), local in self.ports.items() if svc == service)
        return "127.0.0.1", port

    def kill(self, service: str) -> None:
        self.procs[service].send_signal(signal.SIGKILL)
        self.procs[service].wait(10)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)


def isrsim_services(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The cluster's services: those in no profile (the monitoring profile runs Prometheus and Grafana)."""
    return {name: svc for name, svc in spec["services"].items() if "profiles" not in svc}


@pytest.fixture
def compose(tmp_path: Path) -> Iterator[LocalCompose]:
    spec = yaml.safe_load(COMPOSE.read_text())
    local = LocalCompose(spec, tmp_path)
    try:
        yield local
    finally:
        local.close()


def test_compose_file_shape() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    services = isrsim_services(spec)
    assert set(services) == {"controller", "broker-1", "broker-2", "broker-3"}
    volumes = [v.split(":")[0] for s in services.values() for v in s["volumes"]]
    assert len(volumes) == len(set(volumes)) == 4, "each process has its own volume"
    for name, svc in services.items():
        assert svc["command"][0] == "isrsim" and svc["healthcheck"]["test"][:3] == ["CMD", "isrsim", "health"]
        if name.startswith("broker-"):
            env = svc["environment"]
            assert env["ISRSIM_BROKER_ID"] == name.split("-")[1]
            assert env["ISRSIM_CONTROLLER_QUORUM_VOTERS"] == "1000@controller:9093"
            assert svc["depends_on"]["controller"]["condition"] == "service_healthy"


def test_compose_services_form_a_working_cluster(compose: LocalCompose) -> None:
    compose.start("controller")
    wait_until(lambda: compose.healthy("controller"), timeout=30, message="controller healthcheck")
    for b in ("broker-1", "broker-2", "broker-3"):
        compose.start(b)
    for b in ("broker-1", "broker-2", "broker-3"):
        wait_until(lambda b=b: compose.healthy(b), timeout=30, message=f"{b} healthcheck")  # type: ignore[misc]
    host, cport = compose.address("controller")

    def ask(api: int, body: dict[str, Any], port: int = cport) -> dict[str, Any]:
        return trio.run(request, host, port, api, body)

    wait_until(
        lambda: sum(not b["fenced"] for b in ask(ApiKeys.DESCRIBE_CLUSTER, {})["brokers"]) == 3,
        timeout=30,
        message="three unfenced brokers",
    )
    created = ask(
        ApiKeys.CREATE_TOPICS,
        {
            "topics": [{"name": "c", "num_partitions": 3, "replication_factor": 3, "configs": {}}],
            "timeout_ms": 30000,
        },
    )
    assert created["topics"][0]["error_code"] == 0

    def produce(count: int) -> str:
        bootstrap = ",".join(
            f"127.0.0.1:{compose.address(b)[1]}" for b in ("broker-1", "broker-2", "broker-3")
        )
        proc = subprocess.run(
            [sys.executable, "-m", "cli.main", "produce", "c", "--count", str(count), "--acks", "all",
             "--bootstrap-server", bootstrap, "--no-progress"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "10,000 records acknowledged" in produce(10_000)
    compose.kill("broker-2")  # docker compose kill broker-2
    assert "5,000 records acknowledged" in produce(5_000)
    compose.start("broker-2")  # docker compose start broker-2
    wait_until(lambda: compose.healthy("broker-2"), timeout=30, message="broker-2 healthcheck")

    def isr_full() -> bool:
        meta = ask(ApiKeys.METADATA, {"topics": [{"name": "c"}]})
        return all(len(p["isr_nodes"]) == 3 for p in meta["topics"][0]["partitions"])

    wait_until(isr_full, timeout=30, message="broker-2 back in every ISR")
    # Every node serves /metrics (ISRSIM_METRICS_PORT); the leaders soon count no under-replicated partition.
    def metrics(service: str) -> str:
        url = f"http://127.0.0.1:{compose.metrics_ports[service]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())

    for b in ("broker-1", "broker-2", "broker-3"):
        wait_until(
            lambda b=b: "kafka_server_replicamanager_underreplicatedpartitions 0.0" in metrics(b),  # type: ignore[misc]
            timeout=30,
            message=f"{b}: 0 under-replicated partitions",
        )
        assert 'kafka_network_requestmetrics_requestspersec_total{request="Fetch"}' in metrics(b)
    assert "kafka_controller_kafkacontroller_activecontrollercount 1.0" in metrics("controller")
    # The volumes hold what the compose file says: the broker's data and journal, the controller's state.
    assert (compose.root / "broker-2" / "data" / "meta.properties").exists()
    assert (compose.root / "broker-2" / "events.jsonl").exists()
    assert (compose.root / "controller" / "controller" / "cluster-metadata.json").exists()


def test_monitoring_profile_scrapes_every_node_and_its_dashboard_uses_documented_metrics() -> None:
    spec = yaml.safe_load(COMPOSE.read_text())
    monitoring = {n: s for n, s in spec["services"].items() if "profiles" in s}
    assert set(monitoring) == {"prometheus", "grafana"}
    assert all(s["profiles"] == ["monitoring"] for s in monitoring.values())
    for svc in monitoring.values():
        for volume in svc["volumes"]:
            source = volume.split(":")[0]
            assert (REPO_ROOT / source).exists(), f"{source} is mounted but missing from the repository"

    prometheus = yaml.safe_load((REPO_ROOT / "monitoring" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    expected = {
        f"{name}:{svc['environment']['ISRSIM_METRICS_PORT']}" for name, svc in isrsim_services(spec).items()
    }
    assert targets == expected, "Prometheus scrapes every node's metrics port"

    datasources = yaml.safe_load(
        (REPO_ROOT / "monitoring/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    [datasource] = datasources["datasources"]
    dashboard = json.loads((REPO_ROOT / "monitoring/grafana/dashboards/isrsim.json").read_text())
    documented = (REPO_ROOT / "docs" / "metrics.md").read_text()
    titles = set()
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        titles.add(panel["title"])
        assert panel["datasource"]["uid"] == datasource["uid"]
        for target in panel["targets"]:
            for name in re.findall(r"\b(kafka_[a-z_]+)", target["expr"]):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert base in documented, f"panel {panel['title']!r} uses {name}, not in docs/metrics.md"
    assert {
        "Under-replicated partitions",
        "ISR shrinks / expands",
        "Replica fetcher max lag",
        "Request rate",
        "Total time p99",
        "Offline partitions",
    } <= titles
