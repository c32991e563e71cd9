"""The quorum-state file: Kafka's JSON, replaced atomically, read back as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raft.election_state import ElectionState, FileQuorumStateStore, QuorumStateError


def test_quorum_state_round_trips_in_kafkas_format(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path)
    assert store.read() is None
    state = ElectionState(epoch=4, voted_for=1001, leader_id=1001, voters=(1000, 1001, 1002))
    store.write(state)
    assert store.read() == state
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data["leaderEpoch"] == 4 and data["votedId"] == 1001 and data["leaderId"] == 1001
    assert data["currentVoters"] == [{"voterId": 1000}, {"voterId": 1001}, {"voterId": 1002}]
    assert data["data_version"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


def test_a_damaged_quorum_state_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "quorum-state").write_text("{not json")
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileQuorumStateStore(tmp_path).read()
