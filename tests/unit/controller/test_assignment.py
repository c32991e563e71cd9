"""Kafka's replica assignment: its known answer and its spreading invariants."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.elections import assign_replicas_to_brokers


def test_kafka_known_assignment() -> None:
    # AdminUtils' own example: brokers 0..4, 10 partitions, RF 3, fixed start index 0.
    got = assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, random.Random(0), fixed_start_index=0)
    assert got == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_deterministic_with_a_seeded_rng() -> None:
    a = assign_replicas_to_brokers([1, 2, 3], 6, 2, random.Random(42))
    b = assign_replicas_to_brokers([3, 1, 2], 6, 2, random.Random(42))
    assert a == b


def test_rejects_impossible_requests() -> None:
    with pytest.raises(ValueError):
        assign_replicas_to_brokers([1, 2], 1, 3, random.Random(0))
    with pytest.raises(ValueError):
        assign_replicas_to_brokers([1, 2], 0, 1, random.Random(0))
    with pytest.raises(ValueError):
        assign_replicas_to_brokers([1, 2], 1, 0, random.Random(0))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], int, int, int]:
    brokers = draw(st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True))
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32))
    return brokers, partitions, rf, seed


@given(cases())
def test_spread_invariants(case: tuple[list[int], int, int, int]) -> None:
    brokers, partitions, rf, seed = case
    got = assign_replicas_to_brokers(brokers, partitions, rf, random.Random(seed))
    assert sorted(got) == list(range(partitions))
    for replicas in got.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    n = len(brokers)
    leaders = Counter(r[0] for r in got.values())
    counts = [leaders.get(b, 0) for b in brokers]
    # Leaders go round robin: every broker leads floor or ceil of partitions / brokers.
    assert max(counts) - min(counts) <= 1
    replicas_per_broker = Counter(b for r in got.values() for b in r)
    totals = [replicas_per_broker.get(b, 0) for b in brokers]
    if partitions % n == 0:
        assert len(set(totals)) == 1
    else:
        assert max(totals) - min(totals) <= rf
