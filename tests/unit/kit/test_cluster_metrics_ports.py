"""`cluster up`'s layout gives every node its own free metrics port, in its config and in cluster.json."""

from __future__ import annotations

import json
from pathlib import Path

from kit.cluster_files import ClusterInfo
from kit.local_cluster import create_layout


def properties(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_every_node_gets_a_distinct_metrics_port_recorded_in_cluster_json(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 3, 0, ("min.insync.replicas=2",))
    info.save()
    nodes = [info.controller, *info.brokers]
    ports = [n.metrics_port for n in nodes]
    assert all(p > 0 for p in ports) and len(set(ports)) == 4
    assert [int(properties(n.config)["metrics.port"]) for n in nodes] == ports
    loaded = ClusterInfo.load(tmp_path / "root")
    assert [n.metrics_port for n in [loaded.controller, *loaded.brokers]] == ports
    assert loaded.brokers[0].metrics_url == f"http://127.0.0.1:{ports[1]}/metrics"


def test_metrics_port_zero_turns_them_off(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 2, 0, ("metrics.port=0",))
    for node in [info.controller, *info.brokers]:
        assert node.metrics_port == 0 and node.metrics_url is None
        assert properties(node.config)["metrics.port"] == "0"


def test_a_cluster_json_without_metrics_ports_still_loads(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 1, 0, ())
    info.save()
    path = tmp_path / "root" / "cluster.json"
    raw = json.loads(path.read_text())
    del raw["controllers"]  # written before the controller quorum, too
    for node in [raw["controller"], *raw["brokers"]]:
        del node["metrics_port"]  # written before metrics existed
    path.write_text(json.dumps(raw))
    loaded = ClusterInfo.load(tmp_path / "root")
    assert loaded.controller.metrics_port == 0 and loaded.brokers[0].metrics_url is None
