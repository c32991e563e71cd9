"""The election state a voter must not forget (Kafka's ``ElectionState`` and ``FileQuorumStateStore``).

``epoch``, ``voted_for`` and ``leader_id`` are written before the voter acts on a transition: a vote is
granted only once the vote is on disk, so a voter that restarts can never vote twice in one epoch.

The file is Kafka's ``quorum-state`` (data version 0) in the metadata log directory::

    {"clusterId":"","leaderId":1001,"leaderEpoch":4,"votedId":1001,"appliedOffset":0,
     "currentVoters":[{"voterId":1000},{"voterId":1001},{"voterId":1002}],"data_version":0}

It is replaced atomically: a temp file, fsync, rename over the old one, fsync of the directory.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from protocol import environment
from raft.messages import NO_LEADER

QUORUM_STATE_FILE = "quorum-state"
DATA_VERSION = 0


class QuorumStateError(Exception):
    """The quorum-state file cannot be used; the message names the file and why."""


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    voted_for: int = NO_LEADER
    leader_id: int = NO_LEADER
    voters: tuple[int, ...] = ()

    def has_voted(self) -> bool:
        return self.voted_for != NO_LEADER

    def has_leader(self) -> bool:
        return self.leader_id != NO_LEADER

    def to_json(self) -> dict[str, object]:
        return {
            "clusterId": "",
            "leaderId": self.leader_id,
            "leaderEpoch": self.epoch,
            "votedId": self.voted_for,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in self.voters],
            "data_version": DATA_VERSION,
        }

    @classmethod
    def from_json(cls, data: object) -> ElectionState:
        if not isinstance(data, dict) or data.get("data_version", DATA_VERSION) != DATA_VERSION:
            raise ValueError("not a version 0 quorum-state")
        voters = tuple(int(v["voterId"]) for v in data.get("currentVoters") or [])
        return cls(
            epoch=int(data["leaderEpoch"]),
            voted_for=int(data.get("votedId", NO_LEADER)),
            leader_id=int(data.get("leaderId", NO_LEADER)),
            voters=voters,
        )


class QuorumStateStore(Protocol):
    """Where the election state lives (Kafka's ``QuorumStateStore``)."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


class MemoryQuorumStateStore:
    """An in-memory store (tests and simulations; a "crash" keeps what was written)."""

    def __init__(self, state: ElectionState | None = None) -> None:
        self.state = state
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes += 1


class FileQuorumStateStore:
    """``<metadata.log.dir>/quorum-state``, written temp + fsync + rename + directory fsync."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / QUORUM_STATE_FILE

    def read(self) -> ElectionState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise QuorumStateError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            return ElectionState.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise QuorumStateError(
                f"{self.path} is not a valid quorum-state ({exc!r}); restore it, or move it away to start "
                "this voter as if new (it may then vote twice in its last epoch)"
            ) from None

    def write(self, state: ElectionState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(QUORUM_STATE_FILE + ".tmp")
        data = json.dumps(state.to_json(), separators=(",", ":")).encode("utf-8")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            environment.fsync(fd)
        finally:
            os.close(fd)
        environment.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            environment.fsync(dir_fd)
        finally:
            os.close(dir_fd)


__all__ = [
    "QUORUM_STATE_FILE",
    "ElectionState",
    "FileQuorumStateStore",
    "MemoryQuorumStateStore",
    "QuorumStateError",
    "QuorumStateStore",
]
