"""What ``isrsim cluster status`` shows: the processes, the controller quorum (each voter's role, epoch,
log end offset and high watermark, from DESCRIBE_QUORUM), then one row per partition with the active
controller's view (leader, epoch, replicas, ISR) and each replica's own offsets (LEO, HW, lag behind the
leader), then the network faults in force (as the nodes report them; see docs/faults.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from rich.console import Group
from rich.table import Table
from rich.text import Text

from broker import read_journal
from kit.cluster_files import ClusterInfo, ProcessEntry
from kit.controller_quorum import VoterView, describe_quorum, leader_of, voters_of
from kit.errors import KitError
from kit.node_query import ask, first_query_error
from kit.processes import process_state
from protocol import CONTROLLER, ApiKeys, FaultSet, LinkFault, rules_from_body


@dataclass
class StatusData:
    controller: dict[str, Any]
    brokers: list[dict[str, Any]]
    # Every controller, with its quorum role, epoch, log end offset and high watermark.
    controllers: list[dict[str, Any]] = field(default_factory=list)
    # The quorum as its leader describes it: leader_id, epoch, high_watermark (None: no quorum).
    quorum: dict[str, Any] | None = None
    partitions: list[dict[str, Any]] = field(default_factory=list)
    replicas: dict[int, dict[tuple[str, int], dict[str, Any]]] = field(default_factory=dict)
    faults: list[LinkFault] = field(default_factory=list)


STATUS_TIMEOUT_S = 1.5


def _last_role(entry: ProcessEntry) -> str | None:
    """The role a voter last journaled (``quorum_state``): tells a candidate from an unattached voter."""
    try:
        lines = read_journal(Path(entry.journal), "quorum_state")
    except OSError:
        return None
    return str(lines[-1].get("role")) if lines else None


def _controller_rows(
    info: ClusterInfo, views: list[VoterView], answered_cluster: bool, active_id: int | None
) -> list[dict[str, Any]]:
    leader = leader_of(views)
    leos = {int(v["replica_id"]): int(v["log_end_offset"]) for v in (leader.voters if leader else [])}
    by_id = {v.voter.id: v for v in views}
    rows = []
    for c in info.controllers:
        state = process_state(c.pid)
        view = by_id.get(c.id)
        row: dict[str, Any] = {
            "id": c.id,
            "address": c.address,
            "metrics": c.metrics_url,
            "pid": c.pid,
            "state": state,
            "role": "unreachable",
            "active": False,
            "epoch": None,
            "leader_id": None,
            "log_end_offset": None,
            "high_watermark": None,
        }
        if not info.quorum:
            if state == "running" and not answered_cluster:
                row["state"] = "not answering"
            if row["state"] == "running":
                started = read_journal(Path(c.journal), "controller_started")
                row.update(role="leader", active=True, leader_id=c.id)
                row["epoch"] = started[-1].get("controller_epoch") if started else None
            rows.append(row)
            continue
        if state == "running" and (view is None or not view.answered):
            row["state"] = "not answering"
        if view is not None and view.in_quorum:
            if view.is_leader:
                role = "leader"
            elif view.leader_id >= 0:
                role = "follower"
            else:
                # No leader known: the journal tells a candidate from a resigned leader and from an
                # unattached voter (journaled as a follower that knows no leader).
                journaled = _last_role(c)
                role = {"candidate": "candidate", "resigned": "resigned", "follower": "unattached"}.get(
                    journaled or "", "candidate"
                )
            row.update(
                role=role,
                active=view.is_leader and c.id == active_id,
                epoch=view.epoch,
                leader_id=view.leader_id if view.leader_id >= 0 else None,
                log_end_offset=leos.get(c.id),
                high_watermark=view.high_watermark if view.high_watermark >= 0 else None,
            )
        rows.append(row)
    return rows


async def gather(info: ClusterInfo, topic: str | None = None) -> StatusData:
    views: list[VoterView] = []
    if info.quorum:
        views = await describe_quorum(voters_of(info), STATUS_TIMEOUT_S)
    leader = leader_of(views)
    # The controller asked for the cluster's metadata: the quorum leader, or the only controller.
    c = info.controller
    if leader is not None and leader.voter.id is not None:
        c = info.controller_by_id(leader.voter.id)
    cstate = process_state(c.pid) if (leader is not None or not info.quorum) else "stopped"
    results: dict[str, dict[str, Any] | None] = {}

    async def fetch(key: str, host: str, port: int, api: int, body: dict[str, Any]) -> None:
        results[key] = await ask(host, port, api, body, STATUS_TIMEOUT_S)

    topics = None if topic is None else [{"name": topic}]
    try:
        async with trio.open_nursery() as nursery:
            if cstate == "running":
                nursery.start_soon(fetch, "cluster", c.host, c.port, ApiKeys.DESCRIBE_CLUSTER, {})
                nursery.start_soon(fetch, "metadata", c.host, c.port, ApiKeys.METADATA, {"topics": topics})
            for ctl in info.controllers:
                if process_state(ctl.pid) == "running":
                    key = f"f{CONTROLLER}" if not info.several_voters else f"f{ctl.id}"
                    nursery.start_soon(fetch, key, ctl.host, ctl.port, ApiKeys.NET_FAULTS, _DESCRIBE)
            for b in info.brokers:
                if process_state(b.pid) == "running":
                    body = {"topics": topics}
                    nursery.start_soon(
                        fetch, f"b{b.id}", b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, body
                    )
                    nursery.start_soon(fetch, f"f{b.id}", b.host, b.port, ApiKeys.NET_FAULTS, _DESCRIBE)
    except BaseExceptionGroup as group:
        error = first_query_error(group)
        if error is None:
            raise
        raise error from error.__cause__
    for key in ("cluster", "metadata"):
        answer = results.get(key)
        if answer is not None and answer.get("error_code") not in (None, 0):
            results[key] = None  # NOT_CONTROLLER: a leader not active yet
    cluster = results.get("cluster") or {}
    fenced = {x["broker_id"]: x.get("fenced", False) for x in cluster.get("brokers", [])}
    controllers = _controller_rows(
        info, views, results.get("cluster") is not None, c.id if results.get("cluster") else None
    )
    first = dict(controllers[0])
    quorum: dict[str, Any] | None = None
    if leader is not None:
        quorum = {
            "leader_id": leader.voter.id,
            "epoch": leader.epoch,
            "high_watermark": leader.high_watermark,
        }
    elif info.quorum:
        quorum = {
            "leader_id": None,
            "epoch": max((v.epoch for v in views), default=-1),
            "high_watermark": None,
        }
    data = StatusData(
        controller={k: first[k] for k in ("id", "address", "metrics", "pid", "state")},
        brokers=[],
        controllers=controllers,
        quorum=quorum,
    )
    for b in info.brokers:
        st = process_state(b.pid)
        if st == "running" and results.get(f"b{b.id}") is None:
            st = "not answering"
        resp = results.get(f"b{b.id}")
        data.brokers.append(
            {
                "id": b.id,
                "address": b.address,
                "metrics": b.metrics_url,
                "pid": b.pid,
                "state": st,
                "fenced": fenced.get(b.id),
                "truncation_mode": resp.get("truncation_mode") if resp else None,
            }
        )
        if resp:
            data.replicas[b.id] = {(p["topic"], p["partition"]): p for p in resp.get("partitions", [])}
    _add_partitions(data, results.get("metadata") or {})
    data.faults = _faults(results)
    return data


def _add_partitions(data: StatusData, meta: dict[str, Any]) -> None:
    for t in meta.get("topics", []):
        for p in t.get("partitions", []):
            data.partitions.append(
                {
                    "topic": t["name"],
                    "partition": p["partition_index"],
                    "leader": p["leader_id"],
                    "epoch": p["leader_epoch"],
                    "replicas": p["replica_nodes"],
                    "isr": p["isr_nodes"],
                }
            )
    data.partitions.sort(key=lambda p: (p["topic"], p["partition"]))


def _faults(results: dict[str, dict[str, Any] | None]) -> list[LinkFault]:
    tables: list[list[LinkFault]] = []
    for key, resp in results.items():
        if key.startswith("f") and resp is not None and resp.get("error_code", 0) == 0:
            try:
                tables.append(rules_from_body(resp))
            except Exception:  # an older node without NET_FAULTS: no faults to show
                continue
    return list(FaultSet.merge(tables))


_DESCRIBE = {"operation": "describe"}


async def gather_remote(bootstrap: list[tuple[str, int]], topic: str | None = None) -> StatusData:
    """``cluster status --bootstrap-server``: a cluster this command did not start (docker compose, other
    machines), seen through its listeners only. The first bootstrap server that answers names the brokers
    (DESCRIBE_CLUSTER, METADATA: their addresses on the listener asked) and the partitions; each broker is
    then asked for its replicas' offsets. There are no process ids: a node's state is whether it answers.
    A bootstrap server that is not one of the brokers it names is taken for the controller."""
    topics = None if topic is None else [{"name": topic}]
    answered: tuple[str, int] | None = None
    cluster: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None
    for host, port in bootstrap:
        cluster = await ask(host, port, ApiKeys.DESCRIBE_CLUSTER, {}, STATUS_TIMEOUT_S)
        if cluster is None:
            continue
        meta = await ask(host, port, ApiKeys.METADATA, {"topics": topics}, STATUS_TIMEOUT_S)
        answered = (host, port)
        break
    if answered is None or cluster is None:
        tried = ",".join(f"{h}:{p}" for h, p in bootstrap)
        raise KitError(
            f"no bootstrap server answered ({tried}): is the cluster up, and are these its addresses?"
        )
    meta = meta or {}
    # Every broker either answer names, with its address on the listener asked.
    addresses: dict[int, tuple[str, int]] = {}
    for b in meta.get("brokers", []):
        addresses[int(b["node_id"])] = (str(b["host"]), int(b["port"]))
    for b in cluster.get("brokers", []):
        addresses.setdefault(int(b["broker_id"]), (str(b["host"]), int(b["port"])))
    fenced = {int(b["broker_id"]): b["fenced"] for b in cluster.get("brokers", []) if "fenced" in b}
    is_controller = answered not in addresses.values()
    results: dict[str, dict[str, Any] | None] = {}

    async def fetch(key: str, host: str, port: int, api: int, body: dict[str, Any]) -> None:
        results[key] = await ask(host, port, api, body, STATUS_TIMEOUT_S)

    try:
        async with trio.open_nursery() as nursery:
            if is_controller:
                nursery.start_soon(fetch, f"f{CONTROLLER}", *answered, ApiKeys.NET_FAULTS, _DESCRIBE)
            for broker_id, (host, port) in addresses.items():
                body = {"topics": topics}
                nursery.start_soon(fetch, f"b{broker_id}", host, port, ApiKeys.DESCRIBE_REPLICA_STATE, body)
                nursery.start_soon(fetch, f"f{broker_id}", host, port, ApiKeys.NET_FAULTS, _DESCRIBE)
    except BaseExceptionGroup as group:
        error = first_query_error(group)
        if error is None:
            raise
        raise error from error.__cause__
    data = StatusData(
        controller={
            "id": cluster.get("controller_id", -1) if is_controller else "-",
            "address": f"{answered[0]}:{answered[1]}" if is_controller else "-",
            "metrics": None,
            "pid": None,
            "state": "answering" if is_controller else "not asked",
        },
        brokers=[],
    )
    for broker_id, (host, port) in sorted(addresses.items()):
        resp = results.get(f"b{broker_id}")
        data.brokers.append(
            {
                "id": broker_id,
                "address": f"{host}:{port}",
                "metrics": None,
                "pid": None,
                "state": "answering" if resp is not None else "not answering",
                "fenced": fenced.get(broker_id),
                "truncation_mode": resp.get("truncation_mode") if resp else None,
            }
        )
        if resp:
            data.replicas[broker_id] = {(p["topic"], p["partition"]): p for p in resp.get("partitions", [])}
    _add_partitions(data, meta)
    data.faults = _faults(results)
    return data


def status_document(data: StatusData) -> dict[str, Any]:
    """``cluster status -o json``: what the table shows, with each replica's own offsets."""
    partitions = []
    for p in data.partitions:
        tp = (p["topic"], p["partition"])
        offsets = {
            str(b): {k: r[k] for k in ("log_end_offset", "high_watermark") if k in r}
            for b in p["replicas"]
            if (r := data.replicas.get(b, {}).get(tp)) is not None
        }
        partitions.append({**p, "offsets": offsets})
    return {
        "controller": data.controller,
        "controllers": data.controllers,
        "quorum": data.quorum,
        "brokers": data.brokers,
        "partitions": partitions,
        "faults": [dataclasses.asdict(f) for f in data.faults],
    }


_STATE_STYLE = {
    "running": "green",
    "answering": "green",
    "paused": "yellow",
    "stopped": "red",
    "not answering": "yellow",
}


def _truncation_mode_cell(mode: str | None) -> Text:
    """The broker's replication.truncation.mode; an older rule than Kafka's today stands out."""
    if mode is None:
        return Text("-", "dim")
    return Text(mode, "" if mode == "leader-epoch" else "yellow")


def render(data: StatusData, refreshed: str | None = None) -> Group:
    """The tables of ``cluster status``; ``refreshed`` (``--watch``) is said in the processes' title."""
    title = "processes" + (f" (refreshed {refreshed})" if refreshed else "")
    procs = Table(title=title, title_justify="left")
    for col in ("role", "id", "address", "metrics", "pid", "state", "fenced", "truncation mode"):
        procs.add_column(col)
    for c in data.controllers or [data.controller]:
        procs.add_row(
            "controller",
            str(c["id"]),
            c["address"],
            c.get("metrics") or "-",
            str(c["pid"] or "-"),
            Text(c["state"], _STATE_STYLE.get(c["state"], "")),
            "",
            "",
        )
    for b in data.brokers:
        fenced = "" if b["fenced"] is None else ("yes" if b["fenced"] else "no")
        procs.add_row(
            "broker",
            str(b["id"]),
            b["address"],
            b.get("metrics") or "-",
            str(b["pid"] or "-"),
            Text(b["state"], _STATE_STYLE.get(b["state"], "")),
            Text(fenced, "red" if fenced == "yes" else ""),
            _truncation_mode_cell(b.get("truncation_mode")),
        )
    parts = Table(
        title="partitions (controller's view; offsets as each replica reports them)", title_justify="left"
    )
    for col in (
        "topic",
        "partition",
        "leader",
        "epoch",
        "replicas",
        "isr",
        "replica offsets: LEO / HW (lag)",
    ):
        parts.add_column(col)
    if not data.partitions:
        parts.add_row("-", "-", "-", "-", "-", "-", "no topics (or the controller is not answering)")
    for p in data.partitions:
        tp = (p["topic"], p["partition"])
        leader_view = data.replicas.get(p["leader"], {}).get(tp)
        leader_leo = leader_view["log_end_offset"] if leader_view else None
        cells = []
        for r in p["replicas"]:
            view = data.replicas.get(r, {}).get(tp)
            if view is None:
                cells.append(Text(f"{r}: -", "dim"))
                continue
            lag = "" if leader_leo is None else f" ({leader_leo - view['log_end_offset']})"
            style = "" if r in p["isr"] else "yellow"
            cells.append(Text(f"{r}: {view['log_end_offset']}/{view['high_watermark']}{lag}", style))
        leader = Text(str(p["leader"]), "red") if p["leader"] < 0 else Text(str(p["leader"]))
        isr_style = "yellow" if len(p["isr"]) < len(p["replicas"]) else ""
        parts.add_row(
            p["topic"],
            str(p["partition"]),
            leader,
            str(p["epoch"]),
            ",".join(map(str, p["replicas"])),
            Text(",".join(map(str, p["isr"])), isr_style),
            Text("  ").join(cells),
        )
    faults = Table(title="network faults in force (isrsim net status)", title_justify="left")
    for col in ("from", "to", "fault"):
        faults.add_column(col)
    if not data.faults:
        faults.add_row("-", "-", "none")
    for rule in data.faults:
        faults.add_row(rule.src, rule.dst, Text(rule.describe(), "red" if rule.partitioned else "yellow"))
    if not data.controllers:  # a cluster seen through --bootstrap-server: no voters known
        return Group(procs, parts, faults)
    return Group(procs, _quorum_table(data), parts, faults)


_ROLE_STYLE = {"leader": "green", "follower": "", "candidate": "yellow", "unreachable": "red"}


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _quorum_table(data: StatusData) -> Table:
    """One row per controller: its role in the quorum, epoch, log end offset (as the leader last saw it)
    and high watermark (its own)."""
    q = data.quorum
    if q is None:
        title = "controller (a single controller, no quorum)"
    elif q.get("leader_id") is None:
        title = (
            "controller quorum: NO LEADER (an election is running, or a majority is down), "
            f"epoch {q['epoch']}"
        )
    else:
        title = (
            f"controller quorum: leader {q['leader_id']}, epoch {q['epoch']}, "
            f"high watermark {q['high_watermark']}"
        )
    table = Table(title=title, title_justify="left")
    for col in ("controller", "role", "active", "epoch", "log end offset", "high watermark"):
        table.add_column(col)
    for c in data.controllers:
        role = str(c.get("role"))
        table.add_row(
            str(c["id"]),
            Text(role, _ROLE_STYLE.get(role, "yellow")),
            "yes" if c.get("active") else "",
            _cell(c.get("epoch")),
            _cell(c.get("log_end_offset")),
            _cell(c.get("high_watermark")),
        )
    return table
