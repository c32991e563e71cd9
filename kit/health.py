"""Is a local cluster healthy (an active controller, every broker registered and unfenced, every partition
led), and have its
replicas converged (every replica in the ISR, one LEO, HW = LEO): what the commands, the lab and the tests
wait for."""

from __future__ import annotations

import time
from typing import Any

import trio

from kit.cluster_files import ClusterError, ClusterInfo
from kit.controller_quorum import NoActiveController, ask_controller, voters_of
from kit.node_query import ask
from kit.processes import START_TIMEOUT_S, process_state
from protocol import ApiKeys, Errors


async def _controller_views(info: ClusterInfo) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str]:
    """DESCRIBE_CLUSTER and METADATA from the active controller (a quorum's leader once it is active), or
    what keeps it from answering."""
    voters = voters_of(info)
    try:
        cluster, voter = await ask_controller(voters, ApiKeys.DESCRIBE_CLUSTER, {}, 2.0, wait_s=0)
    except NoActiveController as exc:
        return None, None, str(exc).split(": ", 1)[-1]
    if cluster is None or cluster.get("error_code") == Errors.NOT_CONTROLLER:
        return None, None, "no answer from the controller"
    meta, _ = await ask_controller([voter], ApiKeys.METADATA, {"topics": None}, 2.0)
    return cluster, meta, "no answer from the controller"


def wait_healthy(info: ClusterInfo, timeout: float = START_TIMEOUT_S) -> None:
    """An active controller (with a quorum: a leader elected, and active), every broker registered and
    unfenced, and every partition with a leader."""
    deadline = time.monotonic() + timeout
    problem = "no answer from the controller"
    wanted = {b.id for b in info.brokers if process_state(b.pid) == "running"}
    while time.monotonic() < deadline:
        cluster, meta, problem = trio.run(_controller_views, info)
        if cluster is not None and meta is not None:
            live = {b["broker_id"] for b in cluster.get("brokers", []) if not b.get("fenced")}
            leaderless = [
                f"{t['name']}-{p['partition_index']}"
                for t in meta.get("topics", [])
                for p in t.get("partitions", [])
                if p["leader_id"] < 0
            ]
            if wanted <= live and not leaderless:
                return
            problem = (
                f"brokers not yet registered: {sorted(wanted - live)}"
                if not wanted <= live
                else (f"partitions without a leader: {', '.join(leaderless[:10])}")
            )
        time.sleep(0.1)
    raise ClusterError(f"the cluster did not become healthy within {timeout:.0f}s: {problem}")


async def _controller_metadata(info: ClusterInfo, topics: list[str] | None) -> dict[str, Any] | None:
    """The controller's METADATA answer of ``topics`` (None: all); None if it does not answer."""
    body = {"topics": None if topics is None else [{"name": t} for t in topics]}
    if not info.quorum:
        return await ask(info.controller.host, info.controller.port, ApiKeys.METADATA, body, 2.0)
    try:
        meta, _ = await ask_controller(voters_of(info), ApiKeys.METADATA, body, 2.0, wait_s=2.0)
    except NoActiveController:
        return None
    return meta


async def partition_metadata(
    info: ClusterInfo, topics: list[str] | None
) -> dict[tuple[str, int], dict[str, Any]]:
    """The controller's METADATA of ``topics`` (None: all), by partition; empty if it does not answer."""
    meta = await _controller_metadata(info, topics)
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for t in (meta or {}).get("topics", []):
        for p in t.get("partitions", []):
            out[(t["name"], p["partition_index"])] = p
    return out


async def not_converged(info: ClusterInfo) -> list[str]:
    """What keeps the cluster from having converged (empty: every partition's replicas are all in the ISR,
    with one LEO and HW = LEO on every replica)."""
    meta = await partition_metadata(info, None)
    if not meta:
        answer = await _controller_metadata(info, None)
        # A cluster without a topic has converged; one that does not answer has not.
        return (
            []
            if answer is not None and not answer.get("topics")
            else ["the controller did not answer METADATA"]
        )
    states: dict[int, dict[tuple[str, int], dict[str, Any]] | None] = {}

    async def one(b: Any) -> None:
        resp = await ask(b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None}, 2.0)
        states[b.id] = None if resp is None else {(p["topic"], p["partition"]): p for p in resp["partitions"]}

    async with trio.open_nursery() as nursery:
        for b in info.brokers:
            nursery.start_soon(one, b)
    problems = [f"broker {b} does not answer" for b, s in sorted(states.items()) if s is None]
    for (topic, partition), p in sorted(meta.items()):
        name = f"{topic}-{partition}"
        replicas = sorted(p["replica_nodes"])
        if p["leader_id"] < 0:
            problems.append(f"{name}: no leader")
            continue
        if sorted(p["isr_nodes"]) != replicas:
            problems.append(f"{name}: ISR {sorted(p['isr_nodes'])} of replicas {replicas}")
            continue
        offsets = {}
        for r in replicas:
            state = (states.get(r) or {}).get((topic, partition))
            if state is not None:
                offsets[r] = (state["log_end_offset"], state["high_watermark"])
        if len(offsets) < len(replicas):
            continue  # the broker's own problem is listed above
        leos = {leo for leo, _ in offsets.values()}
        if len(leos) != 1 or any(hw != leo for leo, hw in offsets.values()):
            shown = ", ".join(f"{r}: LEO {leo} HW {hw}" for r, (leo, hw) in sorted(offsets.items()))
            problems.append(f"{name}: {shown}")
    return problems
