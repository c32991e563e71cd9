"""`cluster up --controllers N`'s layout (SPEC §11): N controllers with ids from 1000, each in
controller-<id>/, every voter and every broker told all of them in controller.quorum.voters, and
cluster.json's `controllers` list with `controller` as its first entry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.cluster_files import ClusterError, ClusterInfo
from kit.local_cluster import controller_ports, create_layout


def properties(path: str) -> dict[str, str]:
    lines = Path(path).read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_three_voters_each_told_every_voter(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 2, 0, (), controllers=3)
    info.save()
    assert [c.id for c in info.controllers] == [1000, 1001, 1002]
    assert info.controller is info.controllers[0] and info.quorum
    ports = [c.port for c in info.controllers]
    metrics = [n.metrics_port for n in [*info.controllers, *info.brokers]]
    # Every port chosen up front (the voters must know each other's) and all distinct.
    assert all(p > 0 for p in ports) and len(set(ports + metrics)) == len(ports) + len(metrics)
    voters = ",".join(f"{c.id}@127.0.0.1:{c.port}" for c in info.controllers)
    for c in info.controllers:
        assert Path(c.dir).name == f"controller-{c.id}"
        props = properties(c.config)
        assert props["node.id"] == str(c.id) and props["controller.quorum.voters"] == voters
        assert props["metadata.log.dir"] == c.dir and props["listeners"].endswith(f":{c.port}")
    for b in info.brokers:
        assert properties(b.config)["controller.quorum.voters"] == voters

    raw = json.loads((tmp_path / "root" / "cluster.json").read_text())
    assert [c["id"] for c in raw["controllers"]] == [1000, 1001, 1002]
    assert raw["controller"] == raw["controllers"][0]
    assert {"id", "host", "port", "pid", "dir"} <= set(raw["controllers"][0])
    assert raw["settings"]["controllers"] == 3
    loaded = ClusterInfo.load(tmp_path / "root")
    assert loaded.controller is loaded.controllers[0]
    assert loaded.quorum_voters == voters
    loaded.controllers[0].pid = 4242  # one object: what sets a pid on one sets it on `controller`
    assert loaded.controller.pid == 4242
    assert loaded.controller_by_id(1002).port == ports[2]
    with pytest.raises(ClusterError, match="no controller 1005"):
        loaded.controller_by_id(1005)


def test_one_controller_is_a_quorum_of_one_voter(tmp_path: Path) -> None:
    # SPEC §11: --controllers 1 starts one voter of a Raft quorum, laid out as N voters are.
    info = create_layout(tmp_path / "root", 1, 0, (), controllers=1)
    info.save()
    c = info.controller
    assert info.quorum and not info.several_voters and [x.id for x in info.controllers] == [1000]
    assert Path(c.dir).name == "controller-1000" and c.port > 0
    voters = f"1000@127.0.0.1:{c.port}"
    props = properties(c.config)
    assert props["controller.quorum.voters"] == voters and props["node.id"] == "1000"
    assert props["listeners"].endswith(f":{c.port}")
    assert properties(info.brokers[0].config)["controller.quorum.voters"] == voters
    assert not (tmp_path / "root" / "controller").exists()
    raw = json.loads((tmp_path / "root" / "cluster.json").read_text())
    assert [x["id"] for x in raw["controllers"]] == [1000] and raw["controller"] == raw["controllers"][0]
    assert raw["settings"]["controllers"] == 1
    loaded = ClusterInfo.load(tmp_path / "root")
    assert loaded.quorum and loaded.quorum_voters == voters
    # Network faults still name a sole controller `controller` (as its brokers and itself do).
    assert loaded.node_name(loaded.controller) == "controller"


def test_net_faults_take_a_sole_voters_id_for_controller(tmp_path: Path) -> None:
    from kit.net_faults import NetError, cluster_from_info

    one = cluster_from_info(create_layout(tmp_path / "one", 1, 0, (), controllers=1))
    assert one.names == ["controller", "1"] and one.node("1000").name == "controller"
    three = cluster_from_info(create_layout(tmp_path / "three", 1, 0, (), controllers=3))
    assert three.names == ["1", "1000", "1001", "1002"] and three.node("1001").name == "1001"
    with pytest.raises(NetError, match=r"unknown node .controller."):
        three.node("controller")


def test_a_root_made_before_one_voter_quorums_keeps_its_single_controller(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 1, 9092, (), controllers=1)
    info.save()
    path = tmp_path / "root" / "cluster.json"
    raw = json.loads(path.read_text())
    del raw["settings"]["quorum"]  # a root made when one controller ran alone
    path.write_text(json.dumps(raw))
    assert not ClusterInfo.load(tmp_path / "root").quorum


def test_a_cluster_json_without_controllers_loads_as_one_controller(tmp_path: Path) -> None:
    info = create_layout(tmp_path / "root", 1, 0, ())
    info.save()
    path = tmp_path / "root" / "cluster.json"
    raw = json.loads(path.read_text())
    del raw["controllers"]  # written before the quorum
    path.write_text(json.dumps(raw))
    loaded = ClusterInfo.load(tmp_path / "root")
    assert [c.id for c in loaded.controllers] == [1000] and loaded.controller is loaded.controllers[0]


def test_fixed_ports_go_below_the_brokers() -> None:
    assert controller_ports(9092, 3) == [9091, 9090, 9089]
    assert controller_ports(9092, 1) == [9091]
    # With base port 0 even a single voter's port is chosen up front (it is named in the voters line).
    (port,) = controller_ports(0, 1)
    assert port > 0


def test_an_existing_root_keeps_its_number_of_controllers(tmp_path: Path) -> None:
    from kit.local_cluster import check_same_settings

    info = create_layout(tmp_path / "root", 1, 0, (), controllers=3)
    given = {"controllers"}
    check_same_settings(info, given, 1, 0, {}, tmp_path / "root", 3)
    with pytest.raises(ClusterError, match=r"--controllers 1 \(it has 3\).*--reset"):
        check_same_settings(info, given, 1, 0, {}, tmp_path / "root", 1)
    # Not given: the root starts as it was made, whatever the default is.
    check_same_settings(info, set(), 1, 0, {}, tmp_path / "root", 1)
