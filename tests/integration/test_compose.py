"""docker-compose.yml, checked without a Docker engine (none runs on the machines this suite runs on): each
service's `command` runs as a local process (the image's entrypoint, `isrsim`, and the command as its
arguments) with its `environment`, service names mapped to 127.0.0.1, every container port remapped to a
free local port, every volume to a temporary directory and each service's container paths to a directory
where its volumes are mounted (symbolic links); the healthchecks run the same way. The processes must form a
working cluster: a topic is created, records are produced with acks=all by the `client` service, a broker
is killed (`docker compose kill`) and started again (`docker compose start`); the brokers are stopped and
the `report` service runs the Spark report over the volumes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
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
DOCKERFILE = REPO_ROOT / "Dockerfile"
CONTAINER_ROOT = "/var/lib/isrsim"  # every container path the compose file names is below it
# The controller quorum: three voters, node ids 1000-1002.
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
VOTERS = "1000@controller-1:9093,1001@controller-2:9093,1002@controller-3:9093"
NODES = (*CONTROLLERS, "broker-1", "broker-2", "broker-3")


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
        # host port -> local port of the container port it is published on (`ports: ["19091:9092"]`), for
        # addresses a client on the host uses (localhost:19091).
        self.host_ports: dict[int, int] = {}
        for name, svc in self.services.items():
            for published in svc.get("ports", []):
                host_port, container_port = (int(p) for p in str(published).split(":"))
                self.host_ports[host_port] = self.ports[(name, container_port)]

    def volume(self, name: str) -> Path:
        path = self.root / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _mounts(self, service: str) -> Path:
        """The service's container paths: ``<root>/fs/<service>/var/lib/isrsim/...``, with each volume
        linked at its target (as `docker compose` mounts it; a read-only one copied)."""
        fs = self.root / "fs" / service
        for volume in self.services[service].get("volumes", []):
            name, target, *mode = volume.split(":")
            assert target.startswith(CONTAINER_ROOT), target
            mount = fs / target.lstrip("/")
            if mount.exists():
                continue
            mount.parent.mkdir(parents=True, exist_ok=True)
            if mode == ["ro"]:
                # A read-only mount of a volume nothing writes any more (the report runs after `stop`): a
                # copy, so that paths read inside it are container paths (a link would resolve elsewhere).
                shutil.copytree(self.volume(name), mount)
            else:
                mount.symlink_to(self.volume(name), target_is_directory=True)
        (fs / CONTAINER_ROOT.lstrip("/")).mkdir(parents=True, exist_ok=True)
        return fs

    def _local(self, service: str, value: str) -> str:
        def listen(m: re.Match[str]) -> str:
            return f"://127.0.0.1:{self.ports[(service, int(m.group(1)))]}"

        value = re.sub(r"://0\.0\.0\.0:(\d+)", listen, value)
        for (other, port), local in self.ports.items():
            value = value.replace(f"{other}:{port}", f"127.0.0.1:{local}")
        value = re.sub(r"\blocalhost:(\d+)", lambda m: f"127.0.0.1:{self.host_ports[int(m.group(1))]}", value)
        return value.replace(CONTAINER_ROOT, f"{self._mounts(service)}{CONTAINER_ROOT}")

    def _argv(self, argv: list[str]) -> list[str]:
        """The image's entrypoint is `isrsim`: a service's command is its arguments."""
        return [sys.executable, "-m", "cli.main", *argv]

    def _env(self, service: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ISRSIM_")}
        env.update(
            {
                k: self._local(service, str(v))
                for k, v in self.services[service].get("environment", {}).items()
            }
        )
        if service in self.metrics_ports:
            env["ISRSIM_METRICS_PORT"] = str(self.metrics_ports[service])
        return env

    def start(self, service: str) -> None:
        svc = self.services[service]
        log = open(self.root / f"{service}.log", "ab")  # noqa: SIM115 - closed with the process
        argv = [self._local(service, a) for a in svc["command"]]
        self.procs[service] = subprocess.Popen(
            self._argv(argv), env=self._env(service), cwd=self._mounts(service), stdout=log, stderr=log
        )

    def run(self, service: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`docker compose run --rm SERVICE ARGS...` (no ARGS: the service's own command)."""
        argv = [self._local(service, a) for a in (args or self.services[service]["command"])]
        return subprocess.run(
            self._argv(argv), env=self._env(service), cwd=self._mounts(service),
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def stop(self, service: str) -> None:
        """`docker compose stop SERVICE`: its stop_signal, then wait."""
        sig = self.services[service].get("stop_signal", "SIGTERM")
        self.procs[service].send_signal(getattr(signal, sig))
        self.procs[service].wait(30)

    def healthy(self, service: str) -> bool:
        test = self.services[service]["healthcheck"]["test"]
        assert test[:2] == ["CMD", "isrsim"], test  # run in the container directly, not by the entrypoint
        argv = [self._local(service, a) for a in test[2:]]
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
    """The services that run isrsim: all but the monitoring profile's (Prometheus and Grafana)."""
    return {n: s for n, s in spec["services"].items() if "monitoring" not in s.get("profiles", [])}


def cluster_services(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The cluster itself: the services in no profile (the others run on demand)."""
    return {n: s for n, s in spec["services"].items() if "profiles" not in s}


def load_compose(path: Path) -> Any:
    """The file as `docker compose` reads it: ``${VAR:-default}`` replaced by its default."""
    return yaml.safe_load(re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", path.read_text()))


@pytest.fixture
def compose(tmp_path: Path) -> Iterator[LocalCompose]:
    spec = load_compose(COMPOSE)
    local = LocalCompose(spec, tmp_path)
    try:
        yield local
    finally:
        local.close()


def test_compose_file_shape() -> None:
    spec = load_compose(COMPOSE)
    services = spec["services"]
    assert set(services) == {
        *NODES, "client", "report", "prometheus", "grafana",
    }  # fmt: skip
    cluster = cluster_services(spec)
    assert set(cluster) == set(NODES), "the rest on demand (profiles)"
    volumes = [v.split(":")[0] for s in cluster.values() for v in s["volumes"]]
    assert len(volumes) == len(set(volumes)) == 6, "each process has its own volume"
    # One image for the controller, the brokers and the client: the controller's service builds it (the
    # runtime target: no JRE, no PySpark); the others name it and never pull it.
    assert services["controller-1"]["build"]["target"] == "runtime"
    for name in ("controller-2", "controller-3", "broker-1", "broker-2", "broker-3", "client"):
        assert "build" not in services[name], f"{name} builds the image again"
        assert services[name]["pull_policy"] == "never", f"{name} would pull isrsim:latest from a registry"
    for name, svc in cluster.items():
        assert svc["image"] == "isrsim:latest"
        assert svc["command"][0] in ("broker", "controller"), "the entrypoint is isrsim"
        # exec form and SIGTERM: `docker compose stop` is each node's clean shutdown
        assert svc["stop_signal"] == "SIGTERM" and svc["stop_grace_period"]
        check = svc["healthcheck"]
        assert check["test"][:3] == ["CMD", "isrsim", "health"]
        assert check["interval"] == "5s" and check["start_period"]
        # start_interval needs Docker Engine 25+: Engine 20.10 and Compose 1.29 refuse the file with it.
        assert "start_interval" not in check
        if name.startswith("broker-"):
            env = svc["environment"]
            assert env["ISRSIM_BROKER_ID"] == name.split("-")[1]
            assert env["ISRSIM_CONTROLLER_QUORUM_VOTERS"] == VOTERS
            # Kafka's compose layout: INTERNAL for the network and the brokers, EXTERNAL for the host.
            n = name.split("-")[1]
            assert env["ISRSIM_LISTENERS"] == "INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092"
            assert (
                env["ISRSIM_ADVERTISED_LISTENERS"] == f"INTERNAL://{name}:19092,EXTERNAL://localhost:1909{n}"
            )
            assert env["ISRSIM_INTER_BROKER_LISTENER_NAME"] == "INTERNAL"
            assert svc["ports"] == [f"1909{n}:9092"]
            for c in CONTROLLERS:
                assert svc["depends_on"][c]["condition"] == "service_healthy"
        else:  # a voter of the quorum, its node id from 1000
            assert svc["environment"]["ISRSIM_CONTROLLER_QUORUM_VOTERS"] == VOTERS
            assert svc["environment"]["ISRSIM_NODE_ID"] == str(999 + int(name.split("-")[1]))
    report = services["report"]
    assert report["build"]["target"] == "report"
    mounted = {v.split(":")[0] for v in report["volumes"]}
    assert mounted >= {f"{n}-data" for n in NODES} | {"workload"}
    # laid out as `cluster up --controllers 3` lays out a root: controller-<node id>/ per voter
    assert "controller-1-data:/var/lib/isrsim/cluster/controller-1000:ro" in report["volumes"]
    # The host producer's journal (./isrsim-data/workload by default) is read by the report too.
    assert any(v.endswith(":/var/lib/isrsim/cluster/workload-host:ro") for v in report["volumes"])
    dockerfile = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["isrsim"]' in dockerfile and "USER isrsim" in dockerfile
    runtime = dockerfile.split("AS runtime", 1)[1].split("FROM ", 1)[0]
    assert "openjdk" not in runtime and "[report]" not in runtime
    # No wheel left in a layer: the final stages copy a finished virtualenv.
    assert "/wheels" not in dockerfile
    assert "COPY --from=venv /opt/venv /opt/venv" in runtime
    # Every writable volume's mount point exists in the image, owned by isrsim, so that a new volume
    # mounted there is writable by the service (Docker gives an empty volume its mount point's owner).
    base = dockerfile.split("AS base", 1)[1].split("FROM ", 1)[0]
    assert "chown -R isrsim:isrsim /var/lib/isrsim" in base
    for svc in isrsim_services(spec).values():
        for volume in svc.get("volumes", []):
            _, target, *mode = volume.split(":")
            if mode != ["ro"] and target != CONTAINER_ROOT:
                assert target in base, f"{target}: no mount point in the image"
    assert (REPO_ROOT / ".dockerignore").exists()


# In `make compose-test` (CI runs it after `make test`), to hold the default suite's time.
@pytest.mark.compose
@pytest.mark.timeout(1200)  # a cluster, a workload, a kill and restart, then the report (itself up to 600 s)
def test_compose_services_form_a_working_cluster(compose: LocalCompose) -> None:
    for c in CONTROLLERS:
        compose.start(c)
    for c in CONTROLLERS:
        wait_until(lambda c=c: compose.healthy(c), timeout=60, message=f"{c} healthcheck")  # type: ignore[misc]
    brokers = ("broker-1", "broker-2", "broker-3")
    for b in brokers:
        compose.start(b)
    for b in brokers:
        wait_until(lambda b=b: compose.healthy(b), timeout=30, message=f"{b} healthcheck")  # type: ignore[misc]

    # docker compose run --rm client topic create ... / produce ...
    created = compose.run(
        "client", "topic", "create", "c", "--partitions", "3", "--replication-factor", "3",
        "--bootstrap-server", ",".join(f"{c}:9093" for c in CONTROLLERS),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr

    # A client in the compose network bootstraps through the INTERNAL listeners; one on the host through
    # the published EXTERNAL ones. Each is answered with its own listener's addresses.
    internal = "broker-1:19092,broker-2:19092,broker-3:19092"
    external = "localhost:19091,localhost:19092,localhost:19093"

    def produce(count: int, bootstrap: str = internal) -> str:
        proc = compose.run(
            "client", "produce", "c", "--count", str(count), "--acks", "all", "--no-progress",
            "--bootstrap-server", bootstrap,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def brokers_answered(address: str) -> dict[int, int]:
        host, port = compose._local("client", address).split(":")
        meta = trio.run(request, host, int(port), ApiKeys.METADATA, {"topics": None})
        return {b["node_id"]: b["port"] for b in meta["brokers"]}

    internal_ports = {n: compose.ports[(f"broker-{n}", 19092)] for n in (1, 2, 3)}
    external_ports = {n: compose.host_ports[19090 + n] for n in (1, 2, 3)}
    assert brokers_answered("broker-1:19092") == internal_ports
    assert brokers_answered("localhost:19091") == external_ports
    assert brokers_answered("localhost:19093") == external_ports

    assert "8,000 records acknowledged" in produce(8_000)
    assert "2,000 records acknowledged" in produce(2_000, external)
    compose.kill("broker-2")  # docker compose kill broker-2
    assert "5,000 records acknowledged" in produce(5_000)
    compose.start("broker-2")  # docker compose start broker-2
    wait_until(lambda: compose.healthy("broker-2"), timeout=30, message="broker-2 healthcheck")
    host, bport = compose.address("broker-1")

    def isr_full() -> bool:
        meta = trio.run(request, host, bport, ApiKeys.METADATA, {"topics": [{"name": "c"}]})
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
    # one active controller among the voters
    one = "kafka_controller_kafkacontroller_activecontrollercount 1.0"
    active = [c for c in CONTROLLERS if one in metrics(c)]
    assert len(active) == 1, active
    # The volumes hold what the compose file says: the broker's data and journal, the controller's state,
    # and the client's journal of acknowledged batches (written with --bootstrap-server).
    assert (compose.volume("broker-2-data") / "data" / "meta.properties").exists()
    assert (compose.volume("broker-2-data") / "events.jsonl").exists()
    for c in CONTROLLERS:
        assert (compose.volume(f"{c}-data") / "events.jsonl").exists()
    acked = [
        json.loads(line)
        for f in compose.volume("workload").glob("acked-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sum(a["last_offset"] - a["base_offset"] + 1 for a in acked) == 15_000

    if shutil.which("java") is None:
        pytest.skip("the report service needs a JRE")
    for b in brokers:  # docker compose stop: the logs hold still for the report
        compose.stop(b)
    report = compose.run("report", timeout=600)  # docker compose --profile report run --rm report
    written = compose.volume("report") / "report.json"
    assert written.exists(), report.stderr[-3000:]
    result = json.loads(written.read_text())
    checks = {c["name"]: c for c in result["checks"]}
    assert result["verdict"] == "valid", [c for c in result["checks"] if not c["passed"]]
    assert any("acked" in name for name in checks), sorted(checks)


def test_monitoring_profile_scrapes_every_node_and_its_dashboard_uses_documented_metrics() -> None:
    spec = load_compose(COMPOSE)
    monitoring = {n: s for n, s in spec["services"].items() if "monitoring" in s.get("profiles", [])}
    assert set(monitoring) == {"prometheus", "grafana"}
    assert all(s["profiles"] == ["monitoring"] for s in monitoring.values())
    for svc in monitoring.values():
        for volume in svc["volumes"]:
            source = volume.split(":")[0]
            assert (REPO_ROOT / source).exists(), f"{source} is mounted but missing from the repository"

    prometheus = yaml.safe_load((REPO_ROOT / "monitoring" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    expected = {
        f"{name}:{svc['environment']['ISRSIM_METRICS_PORT']}" for name, svc in cluster_services(spec).items()
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


# ------------------------------------------------------------------------------------ the secure variant

SECURE_COMPOSE = REPO_ROOT / "docker-compose.secure.yml"


def compose_merge(base: Any, override: Any, key: str = "") -> Any:
    """`docker compose -f base -f override`: maps merge key by key; `volumes` and `ports` lists add up
    (a volume's target replaced); any other value is replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = compose_merge(base[k], v, k) if k in base else v
        return out
    if key in ("volumes", "ports") and isinstance(base, list) and isinstance(override, list):
        targets = {str(v).split(":")[1] if key == "volumes" else str(v) for v in override}
        kept = [v for v in base if (str(v).split(":")[1] if key == "volumes" else str(v)) not in targets]
        return kept + override
    return override


def test_secure_compose_variant_runs_on_sasl_ssl(tmp_path: Path) -> None:
    """The secure overlay, cheaply: secrets-init, the controller and one broker (on SASL_SSL, healthy by
    their authenticated healthchecks), and the client (ISRSIM_COMMAND_CONFIG) creating and writing a topic;
    a plaintext client is not served. (min.insync.replicas=2 with one broker: acks=1.)"""
    spec = compose_merge(load_compose(COMPOSE), load_compose(SECURE_COMPOSE))
    nodes = cluster_services(spec)
    assert set(nodes) == {"secrets-init", *NODES}
    for name in NODES:
        assert nodes[name]["depends_on"]["secrets-init"]["condition"] == "service_completed_successfully"
        assert "secrets:/var/lib/isrsim/secrets:ro" in nodes[name]["volumes"]
    local = LocalCompose(spec, tmp_path)
    try:
        made = local.run("secrets-init")
        assert made.returncode == 0, made.stderr
        again = local.run("secrets-init")
        assert again.returncode == 0 and "nothing made" in again.stdout  # a restart keeps the passwords
        secrets = local.volume("secrets")
        assert stat.S_IMODE((secrets / "client.properties").stat().st_mode) == 0o600
        # The nodes and the client mount `secrets`: the CA's certificate, not its key (only secrets-init
        # mounts `ca`).
        assert (secrets / "security" / "ca.pem").exists()
        assert not list(secrets.rglob("ca-key.pem"))
        assert (local.volume("ca") / "ca-key.pem").exists()
        for name in (*NODES, "client"):
            assert not any(v.startswith("ca:") for v in spec["services"][name]["volumes"]), name
        assert (local.volume("broker-1-data") / "data" / "security" / "credentials.json").exists()
        for c in CONTROLLERS:
            local.start(c)
        for c in CONTROLLERS:
            wait_until(lambda c=c: local.healthy(c), timeout=60, message=f"{c} healthcheck")  # type: ignore[misc]
        local.start("broker-1")
        wait_until(lambda: local.healthy("broker-1"), timeout=30, message="broker-1 healthcheck")
        created = local.run(
            "client", "topic", "create", "s", "--partitions", "1", "--replication-factor", "1",
            "--bootstrap-server", ",".join(f"{c}:9093" for c in CONTROLLERS),
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        produced = local.run(
            "client", "produce", "s", "--count", "500", "--acks", "1", "--no-progress",
            "--bootstrap-server", "broker-1:19092",
        )  # fmt: skip
        assert "500 records acknowledged" in produced.stdout, produced.stderr
        host, port = local.address("broker-1")
        with pytest.raises(Exception):  # noqa: B017 - refused, lost or timed out: anything but an answer
            trio.run(request, host, port, ApiKeys.METADATA, {"topics": None})
    finally:
        local.close()
