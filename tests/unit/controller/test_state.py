"""The controller's state file: round trip, atomic replacement, refusal of foreign or broken files, and
the controller epoch bump at every start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.state import (
    BrokerRegistration,
    ClusterState,
    PartitionState,
    StateError,
    TopicState,
    load_state,
    save_state,
    start_new_epoch,
    state_path,
)


def sample_state() -> ClusterState:
    state = ClusterState(cluster_id="c1", controller_epoch=3, next_broker_epoch=12)
    state.brokers[1] = BrokerRegistration(1, "127.0.0.1", 9001, 10, "inc-a", fenced=False)
    state.brokers[2] = BrokerRegistration(
        2, "10.0.0.2", 9002, 11, "inc-b", fenced=True, in_controlled_shutdown=True
    )
    state.topics["t"] = TopicState(
        "t",
        {0: PartitionState([1, 2], 1, 4, [1], 9, 3), 1: PartitionState([2, 1], -1, 2, [2], 5, 2)},
        {"min.insync.replicas": "2"},
    )
    state.pending_deletions[2] = [("gone", 0), ("gone", 1)]
    return state


def test_round_trip(tmp_path: Path) -> None:
    state = sample_state()
    save_state(tmp_path, state)
    assert load_state(tmp_path, "c1") == state


def test_missing_file_is_a_fresh_state(tmp_path: Path) -> None:
    assert load_state(tmp_path / "nowhere", "c9") == ClusterState(cluster_id="c9")


def test_save_replaces_atomically_and_leaves_no_temp_file(tmp_path: Path) -> None:
    state = sample_state()
    save_state(tmp_path, state)
    state.controller_epoch = 4
    save_state(tmp_path, state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster-metadata.json"]
    assert json.loads(state_path(tmp_path).read_text())["controller_epoch"] == 4


def test_other_cluster_is_refused(tmp_path: Path) -> None:
    save_state(tmp_path, sample_state())
    with pytest.raises(StateError, match="belongs to cluster 'c1'"):
        load_state(tmp_path, "other")


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 99}', '{"version": 1}'])
def test_broken_file_is_refused_not_replaced(tmp_path: Path, text: str) -> None:
    state_path(tmp_path).write_text(text)
    with pytest.raises(StateError, match="not valid"):
        load_state(tmp_path, "c1")
    assert state_path(tmp_path).read_text() == text


def test_every_start_bumps_the_controller_epoch(tmp_path: Path) -> None:
    assert start_new_epoch(tmp_path, "c").controller_epoch == 1
    assert start_new_epoch(tmp_path, "c").controller_epoch == 2
    assert load_state(tmp_path, "c").controller_epoch == 2


ids = st.integers(0, 20)


@st.composite
def states(draw: st.DrawFn) -> ClusterState:
    state = ClusterState(
        cluster_id=draw(st.text(min_size=1, max_size=8)),
        controller_epoch=draw(st.integers(0, 10**6)),
        next_broker_epoch=draw(st.integers(1, 10**9)),
    )
    for b in draw(st.lists(ids, unique=True, max_size=5)):
        state.brokers[b] = BrokerRegistration(
            b,
            draw(st.text(max_size=10)),
            draw(st.integers(0, 65535)),
            draw(st.integers(1, 10**9)),
            draw(st.text(max_size=10)),
            draw(st.booleans()),
            draw(st.booleans()),
        )
    for name in draw(st.lists(st.from_regex(r"[a-z0-9._-]{1,10}", fullmatch=True), unique=True, max_size=3)):
        parts = {
            i: PartitionState(
                draw(st.lists(ids, unique=True, min_size=1, max_size=4)),
                draw(st.integers(-1, 20)),
                draw(st.integers(0, 10**6)),
                draw(st.lists(ids, unique=True, max_size=4)),
                draw(st.integers(0, 10**6)),
                draw(st.integers(0, 10**6)),
            )
            for i in range(draw(st.integers(0, 4)))
        }
        configs = draw(st.dictionaries(st.text(min_size=1, max_size=5), st.text(max_size=5), max_size=2))
        state.topics[name] = TopicState(name, parts, configs)
    return state


@settings(max_examples=50)
@given(states())
def test_round_trip_any_state(state: ClusterState) -> None:
    assert ClusterState.from_json(json.loads(json.dumps(state.to_json()))) == state
