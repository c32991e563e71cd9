"""The controller's durable cluster metadata: registered brokers, topics and every partition's assignment,
leader, leader epoch, ISR and partition epoch, plus the controller epoch.

Plain dataclasses, kept in one JSON file in the controller's directory (``metadata.log.dir``), replaced
atomically (temp file, fsync, rename, fsync of the directory) after every change, and loaded at start.
It plays the part of ZooKeeper's ``/brokers`` and ``/controller_epoch`` znodes (or KRaft's metadata log).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol import environment
from protocol.common import TopicPartition
from server.producer_ids import ProducerIdsRecord

STATE_FILE_NAME = "cluster-metadata.json"
STATE_VERSION = 1
NO_LEADER = -1
# Kafka's LeaderAndIsr.EpochDuringDelete: the leader epoch STOP_REPLICA carries when deleting.
EPOCH_DURING_DELETE = -2


class StateError(Exception):
    """The state file cannot be used; the message says which file and why."""


@dataclass(slots=True)
class BrokerRegistration:
    """One registered broker (KRaft's ``BrokerRegistration``). ``epoch`` is unique cluster-wide and
    increases with every registration; ``fenced`` brokers take no part in elections or ISRs."""

    broker_id: int
    host: str
    port: int
    epoch: int
    incarnation_id: str
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # Every advertised listener (name, host, port), the inter-broker one (host, port) first.
    listeners: list[tuple[str, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class PartitionState:
    """Kafka's ``LeaderIsrAndControllerEpoch`` with the assignment (KRaft's ``PartitionRegistration``).

    ``leader_epoch`` rises with every leader change (never with an ISR change alone, KAFKA-15021);
    ``partition_epoch`` rises with every change at all (ALTER_PARTITION and brokers compare it)."""

    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0
    controller_epoch: int = 0
    # An ongoing reassignment (KRaft's PartitionRegistration addingReplicas / removingReplicas): ``replicas``
    # is then the target followed by the replicas being removed.
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicState:
    name: str
    partitions: dict[int, PartitionState]
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterState:
    cluster_id: str
    controller_epoch: int = 0
    next_broker_epoch: int = 1
    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    # Replicas of deleted topics on brokers that were down at deletion: STOP_REPLICA(delete) on return.
    pending_deletions: dict[int, list[TopicPartition]] = field(default_factory=dict)
    # Where the next block of producer ids starts (ALLOCATE_PRODUCER_IDS; server/producer_ids.py).
    producer_ids: ProducerIdsRecord = field(default_factory=ProducerIdsRecord)
    # Dynamic broker configs (AlterConfigs on a BROKER resource): "" for every broker, or a broker's id.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def partition(self, tp: TopicPartition) -> PartitionState | None:
        topic = self.topics.get(tp[0])
        return None if topic is None else topic.partitions.get(tp[1])

    def all_partitions(self) -> list[tuple[TopicPartition, PartitionState]]:
        return [
            ((name, idx), p)
            for name, topic in sorted(self.topics.items())
            for idx, p in sorted(topic.partitions.items())
        ]

    def allocate_broker_epoch(self) -> int:
        epoch = self.next_broker_epoch
        self.next_broker_epoch += 1
        return epoch

    # ------------------------------------------------------------------------------------ JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "cluster_id": self.cluster_id,
            "controller_epoch": self.controller_epoch,
            "next_broker_epoch": self.next_broker_epoch,
            "brokers": [
                {
                    "broker_id": b.broker_id,
                    "host": b.host,
                    "port": b.port,
                    "epoch": b.epoch,
                    "incarnation_id": b.incarnation_id,
                    "fenced": b.fenced,
                    "in_controlled_shutdown": b.in_controlled_shutdown,
                    "listeners": [list(li) for li in b.listeners],
                }
                for _, b in sorted(self.brokers.items())
            ],
            "topics": [
                {
                    "name": t.name,
                    "configs": dict(sorted(t.configs.items())),
                    "partitions": [
                        {
                            "partition": idx,
                            "replicas": list(p.replicas),
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "isr": list(p.isr),
                            "partition_epoch": p.partition_epoch,
                            "controller_epoch": p.controller_epoch,
                            **(
                                {
                                    "adding_replicas": list(p.adding_replicas),
                                    "removing_replicas": list(p.removing_replicas),
                                }
                                if p.adding_replicas or p.removing_replicas
                                else {}
                            ),
                        }
                        for idx, p in sorted(t.partitions.items())
                    ],
                }
                for _, t in sorted(self.topics.items())
            ],
            "pending_deletions": [
                {"broker_id": b, "partitions": [[tp[0], tp[1]] for tp in tps]}
                for b, tps in sorted(self.pending_deletions.items())
                if tps
            ],
            "producer_ids": self.producer_ids.to_json(),
            "broker_configs": {
                name: dict(sorted(configs.items())) for name, configs in sorted(self.broker_configs.items())
            },
        }

    @classmethod
    def from_json(cls, data: Any) -> ClusterState:
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError("not a version 1 isrsim controller state")
        state = cls(
            cluster_id=str(data["cluster_id"]),
            controller_epoch=int(data["controller_epoch"]),
            next_broker_epoch=int(data["next_broker_epoch"]),
        )
        for b in data["brokers"]:
            reg = BrokerRegistration(
                broker_id=int(b["broker_id"]),
                host=str(b["host"]),
                port=int(b["port"]),
                epoch=int(b["epoch"]),
                incarnation_id=str(b["incarnation_id"]),
                fenced=bool(b["fenced"]),
                in_controlled_shutdown=bool(b["in_controlled_shutdown"]),
                listeners=[(str(n), str(h), int(p)) for n, h, p in b.get("listeners", [])],
            )
            state.brokers[reg.broker_id] = reg
        for t in data["topics"]:
            partitions = {
                int(p["partition"]): PartitionState(
                    replicas=[int(r) for r in p["replicas"]],
                    leader=int(p["leader"]),
                    leader_epoch=int(p["leader_epoch"]),
                    isr=[int(r) for r in p["isr"]],
                    partition_epoch=int(p["partition_epoch"]),
                    controller_epoch=int(p["controller_epoch"]),
                    adding_replicas=[int(r) for r in p.get("adding_replicas", [])],
                    removing_replicas=[int(r) for r in p.get("removing_replicas", [])],
                )
                for p in t["partitions"]
            }
            configs = {str(k): str(v) for k, v in t["configs"].items()}
            state.topics[str(t["name"])] = TopicState(str(t["name"]), partitions, configs)
        for entry in data.get("pending_deletions", []):
            state.pending_deletions[int(entry["broker_id"])] = [
                (str(tp[0]), int(tp[1])) for tp in entry["partitions"]
            ]
        state.producer_ids = ProducerIdsRecord.from_json(data.get("producer_ids"))
        for name, configs in (data.get("broker_configs") or {}).items():
            state.broker_configs[str(name)] = {str(k): str(v) for k, v in configs.items()}
        return state


# ---------------------------------------------------------------------------------------- files


def state_path(directory: Path) -> Path:
    return directory / STATE_FILE_NAME


def load_state(directory: Path, cluster_id: str) -> ClusterState:
    """The saved state, or a fresh one if there is none. A file that cannot be read, or that belongs to
    another cluster, is an error (never silently replaced: it holds every partition's epochs)."""
    path = state_path(directory)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ClusterState(cluster_id=cluster_id)
    except OSError as exc:
        raise StateError(f"cannot read controller state {path}: {exc.strerror}") from None
    try:
        state = ClusterState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateError(
            f"controller state {path} is not valid ({exc!r}); restore it or move it away to start empty"
        ) from None
    if state.cluster_id != cluster_id:
        raise StateError(
            f"controller state {path} belongs to cluster {state.cluster_id!r}, not {cluster_id!r} "
            "(cluster.id); use another metadata.log.dir or the matching cluster.id"
        )
    return state


def save_state(directory: Path, state: ClusterState) -> None:
    """Writes the state atomically: a temp file, fsync, rename over the old file, fsync the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    path = state_path(directory)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(state.to_json(), indent=1, sort_keys=False).encode("utf-8") + b"\n"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        environment.fsync(fd)
    finally:
        os.close(fd)
    environment.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        environment.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def start_new_epoch(directory: Path, cluster_id: str) -> ClusterState:
    """Loads the state, bumps the controller epoch (every start is a new controller generation, as a
    ZooKeeper-era controller election increments ``/controller_epoch``) and saves it before anything is
    sent, so no broker can see two controllers with the same epoch."""
    state = load_state(directory, cluster_id)
    state.controller_epoch += 1
    save_state(directory, state)
    return state


__all__ = [
    "EPOCH_DURING_DELETE",
    "NO_LEADER",
    "STATE_FILE_NAME",
    "BrokerRegistration",
    "ClusterState",
    "PartitionState",
    "StateError",
    "TopicState",
    "load_state",
    "save_state",
    "start_new_epoch",
    "state_path",
]
