"""Helpers for replication tests: drive unmanaged brokers with LEADER_AND_ISR as a controller would, read
their replica state, and compare their logs."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from kit import unmanaged
from protocol.api_keys import ApiKeys
from tests.integration.harness import BrokerProcess, python_cmd, request, wait_until


def leader_and_isr_body(
    brokers: Sequence[BrokerProcess],
    topic: str,
    partitions: Sequence[int],
    *,
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    replicas: Sequence[int] | None = None,
    controller_epoch: int = 1,
    live: Sequence[BrokerProcess] | None = None,
    leader_address: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """LEADER_AND_ISR making ``leader`` the leader of ``partitions`` (``kit.unmanaged``)."""
    return unmanaged.leader_and_isr_body(
        topic,
        dict.fromkeys(partitions, leader),
        leader_epoch=leader_epoch,
        replicas=list(replicas) if replicas is not None else [b.broker_id for b in brokers],
        isr=isr,
        live=live or brokers,
        leader_address={leader: leader_address} if leader_address is not None else None,
        controller_epoch=controller_epoch,
    )


def send_leader_and_isr(targets: Sequence[BrokerProcess], body: dict[str, Any]) -> None:
    """Sends LEADER_AND_ISR to each target (the leader first, as the controller does) and checks it took."""
    trio.run(unmanaged.send_leader_and_isr, targets, body)


def describe(broker: BrokerProcess) -> dict[tuple[str, int], dict[str, Any]]:
    return trio.run(unmanaged.replica_state, broker)


def describe_full(broker: BrokerProcess) -> dict[str, Any]:
    return trio.run(request, broker.host, broker.port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": None})


def wait_converged(
    brokers: Sequence[BrokerProcess], topic: str, partitions: Sequence[int], *, timeout: float = 30.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """Waits until every broker has the same LEO and HW (HW == LEO) for every partition."""
    return wait_until(
        lambda: unmanaged.converged([describe(b) for b in brokers], topic, partitions),
        timeout=timeout,
        interval=0.1,
        message=lambda: (
            f"replicas to converge: {[(b.broker_id, describe(b)) for b in brokers if b.is_running()]}"
        ),
    )


def segment_bytes(broker: BrokerProcess, topic: str, partition: int) -> bytes:
    """Every segment of a partition, in offset order, as on disk."""
    directory = broker.log_dir / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def start_producer(
    topic: str,
    count: int,
    brokers: Sequence[BrokerProcess],
    journal: Path,
    *,
    acks: str = "all",
    extra: Sequence[str] = (),
) -> subprocess.Popen[str]:
    bootstrap = ",".join(b.address for b in brokers)
    return subprocess.Popen(
        python_cmd(
            "produce",
            topic,
            "--count",
            str(count),
            "--acks",
            acks,
            "--bootstrap-server",
            bootstrap,
            "--acked-journal",
            str(journal),
            "--no-progress",
            *extra,
        ),
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def acked_lines(journal: Path) -> int:
    return sum(p.read_text().count("\n") for p in journal.glob("acked-*.jsonl")) if journal.exists() else 0
