"""A stand-in controller for brokers that no controller manages (``broker start`` without
``controller.quorum.voters``): the program gives leadership with LEADER_AND_ISR, as a controller would, and
reads each replica's state back with DESCRIBE_REPLICA_STATE. The benchmarks and the replication tests
drive their brokers this way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kit.errors import ClusterError
from kit.node_query import request
from kit.processes import BrokerProcess
from protocol import ApiKeys

# The controller id the stand-in signs its requests with (a real controller's is 1000).
CONTROLLER_ID = 100

TopicPartition = tuple[str, int]


def leader_and_isr_body(
    topic: str,
    leaders: Mapping[int, int],
    *,
    leader_epoch: int,
    replicas: Sequence[int],
    isr: Mapping[int, Sequence[int]] | Sequence[int] | None = None,
    live: Iterable[BrokerProcess] = (),
    leader_address: Mapping[int, tuple[str, int]] | None = None,
    controller_epoch: int = 1,
) -> dict[str, Any]:
    """LEADER_AND_ISR for ``topic``: partition -> leader in ``leaders``; the ISR is ``isr`` (one list for
    every partition, or one per partition; default: the replicas). The followers find the leaders among
    ``live`` (those that have served); ``leader_address`` points them elsewhere for a broker (a proxy)."""
    addresses = {b.broker_id: (b.host, b.port) for b in live if b.port > 0}
    addresses.update(leader_address or {})

    def isr_of(partition: int) -> list[int]:
        if isr is None:
            return list(replicas)
        if isinstance(isr, Mapping):
            return list(isr[partition])
        return list(isr)

    return {
        "controller_id": CONTROLLER_ID,
        "controller_epoch": controller_epoch,
        "broker_epoch": -1,
        "topic_states": [
            {
                "topic_name": topic,
                "partition_states": [
                    {
                        "partition_index": p,
                        "controller_epoch": controller_epoch,
                        "leader": leader,
                        "leader_epoch": leader_epoch,
                        "isr": isr_of(p),
                        "partition_epoch": leader_epoch,
                        "replicas": list(replicas),
                        "is_new": False,
                    }
                    for p, leader in sorted(leaders.items())
                ],
            }
        ],
        "live_leaders": [
            {"broker_id": i, "host_name": host, "port": port} for i, (host, port) in addresses.items()
        ],
    }


async def send_leader_and_isr(targets: Sequence[BrokerProcess], body: dict[str, Any]) -> None:
    """Sends ``body`` to each target in order (the leaders first, as a controller does); a ClusterError
    names the first that refuses it or any of its partitions."""
    for b in targets:
        resp = await request(b.host, b.port, ApiKeys.LEADER_AND_ISR, body, timeout=60)
        bad = [e for e in resp.get("partition_errors", []) if e["error_code"] != 0]
        if resp.get("error_code", 0) != 0 or bad:
            raise ClusterError(
                f"LEADER_AND_ISR to broker {b.broker_id} failed: {resp.get('error_code')} {bad[:3]}"
            )


async def replica_state(b: BrokerProcess, timeout: float = 30.0) -> dict[TopicPartition, dict[str, Any]]:
    """Every replica a broker hosts, by (topic, partition): LEO, HW, epochs ... (DESCRIBE_REPLICA_STATE)."""
    resp = await request(b.host, b.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None}, timeout=timeout)
    return {(p["topic"], p["partition"]): p for p in resp["partitions"]}


def converged(
    views: Sequence[Mapping[TopicPartition, Mapping[str, Any]]], topic: str, partitions: Iterable[int]
) -> dict[TopicPartition, tuple[int, int]] | None:
    """(LEO, HW) of each partition when every view (one broker's replica state) hosts it with the same LEO
    and HW, and HW == LEO; None while any does not."""
    out: dict[TopicPartition, tuple[int, int]] = {}
    for p in partitions:
        tp = (topic, p)
        if any(tp not in v for v in views):
            return None
        seen = {(v[tp]["log_end_offset"], v[tp]["high_watermark"]) for v in views}
        if len(seen) != 1:
            return None
        leo, hw = seen.pop()
        if leo != hw:
            return None
        out[tp] = (leo, hw)
    return out
