"""The chaos schedule is a pure function: the same inputs give the same bytes, at most ``max_down`` brokers
are unavailable at any moment, no two faults in force share a broker, isolate runs alone, every requested
kind comes up in a long run, every fault ends by the end of the run, and bad input is one clear line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.chaos.schedule import (
    DOWN_KINDS,
    FAULT_KINDS,
    Schedule,
    ScheduleError,
    make_schedule,
    parse_kinds,
)

ALL = ",".join(FAULT_KINDS)


def test_same_inputs_same_bytes_and_another_seed_another_schedule() -> None:
    a = make_schedule(7, 120, 3, ALL, 1, [1, 2, 3])
    b = make_schedule(7, 120, 3, ALL, 1, [3, 2, 1])
    assert a.to_json() == b.to_json()
    assert make_schedule(8, 120, 3, ALL, 1, [1, 2, 3]).to_json() != a.to_json()
    body = json.loads(a.to_json())
    assert body["seed"] == 7 and body["brokers"] == [1, 2, 3] and body["max_down"] == 1
    assert body["faults"] == list(FAULT_KINDS)
    assert [s["index"] for s in body["steps"]] == list(range(len(a.steps)))
    # An int and a float of the same value are the same input (the command line gives floats).
    assert (
        make_schedule(7, 300, 3, ALL, 1, [1, 2, 3]).to_json()
        == make_schedule(7, 300.0, 3.0, ALL, 1, [1, 2, 3]).to_json()
    )
    # The kinds' order on the command line does not matter; they are a set.
    assert (
        make_schedule(7, 120, 3, "loss,kill,delay", 1, [1, 2, 3]).to_json()
        == make_schedule(7, 120, 3, "kill,delay,loss", 1, [1, 2, 3]).to_json()
    )


def _check_invariants(s: Schedule) -> None:
    for step in s.steps:
        assert step.at_s < step.until_s <= s.duration_s
        assert step.at_s >= s.interval_s
        assert step.kind in s.faults
        for node in step.nodes:
            assert (
                node == "controller" or (node == "clients" and step.kind == "loss") or int(node) in s.brokers
            )
        if "clients" in step.nodes:
            assert step.nodes[0] != "clients" and step.params["one_way"]  # the answers to clients only
        assert len(step.down) == (1 if step.kind in DOWN_KINDS else 0)
    # Check at every moment something changes.
    moments = sorted({x for step in s.steps for x in (step.at_s, step.until_s)})
    for t in moments:
        assert len(s.down_at(t)) <= s.max_down, (t, s.in_force_at(t))
        # A broker down until less than an interval ago still counts when a fault that takes one down starts.
        starting = [step for step in s.steps if step.at_s == t and step.down]
        if starting:
            recent = {b for step in s.steps if step.down and t - s.interval_s < step.until_s <= t
                      for b in step.down}  # fmt: skip
            assert len(recent | s.down_at(t)) <= s.max_down, (t, starting, recent)
        live = s.in_force_at(t)
        brokers = [b for step in live for b in step.brokers]
        assert len(brokers) == len(set(brokers)), (t, live)
        if any(step.kind == "isolate" for step in live):
            assert len(live) == 1, (t, live)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    brokers=st.integers(2, 6),
    max_down=st.integers(1, 5),
    duration=st.integers(10, 400),
    interval=st.sampled_from([0.5, 1, 2, 3, 5]),
    kinds=st.sets(st.sampled_from(FAULT_KINDS), min_size=1),
)
def test_invariants_hold_over_the_whole_schedule(
    seed: int, brokers: int, max_down: int, duration: int, interval: float, kinds: set[str]
) -> None:
    max_down = min(max_down, brokers - 1)
    if duration < 2 * interval:
        return
    s = make_schedule(seed, duration, interval, kinds, max_down, list(range(1, brokers + 1)))
    _check_invariants(s)


def test_every_kind_comes_up_in_a_long_run_and_the_nemesis_keeps_busy() -> None:
    for seed in range(20):
        s = make_schedule(seed, 300, 3, ALL, 1, [1, 2, 3])
        counts = s.counts()
        assert all(n >= 2 for n in counts.values()), (seed, counts)
        # Something is in force most of the time (not a schedule that mostly rests), though with max-down 1
        # a broker's fault keeps the next one that takes a broker down waiting for an interval after it.
        busy = sum(1 for i in range(30, 3000) if s.in_force_at(i / 10))
        assert busy / 2970 > 0.6, (seed, busy)
    # Five brokers and max-down 2: two brokers down at once happens.
    s = make_schedule(3, 300, 3, ALL, 2, [1, 2, 3, 4, 5])
    assert max(len(s.down_at(t / 10)) for t in range(3000)) == 2


def test_one_kind_only() -> None:
    s = make_schedule(1, 60, 3, "kill", 1, [1, 2, 3])
    assert {x.kind for x in s.steps} == {"kill"} and len(s.steps) >= 5
    assert all(x.params == {"signal": "KILL"} for x in s.steps)
    d = make_schedule(1, 60, 3, "delay,loss", 0, [1])
    assert {x.kind for x in d.steps} == {"delay", "loss"}
    assert all(x.nodes == ["1", "controller"] for x in d.steps if x.kind == "delay")
    # A loss falls on the link to the controller or on the broker's answers to its clients.
    assert {x.nodes[1] for x in d.steps if x.kind == "loss"} == {"controller", "clients"}
    assert all(25 <= x.params.get("ms", 50) <= 400 for x in d.steps)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((120, 3, "kill,boom", 1, [1, 2, 3]), "unknown fault kind 'boom': choose from kill, term, pause"),
        ((120, 3, " , ", 1, [1, 2, 3]), "--faults names no fault kind"),
        ((0, 3, ALL, 1, [1, 2, 3]), "--duration must be a positive number of seconds (got 0)"),
        ((-5, 3, ALL, 1, [1, 2, 3]), "--duration must be a positive number of seconds (got -5)"),
        ((float("nan"), 3, ALL, 1, [1, 2, 3]), "--duration must be a positive"),
        ((120, 0, ALL, 1, [1, 2, 3]), "--interval must be at least 0.5 seconds (got 0)"),
        ((5, 3, ALL, 1, [1, 2, 3]), "--duration 5 leaves no room for a fault"),
        ((120, 3, ALL, 3, [1, 2, 3]), "--max-down 3 must be less than the number of brokers (3)"),
        ((120, 3, ALL, 5, [1, 2, 3]), "--max-down 5 must be less than the number of brokers (3)"),
        ((120, 3, ALL, -1, [1, 2, 3]), "--max-down must be >= 0 (got -1)"),
        ((120, 3, "kill,delay", 0, [1, 2, 3]), "--max-down 0 lets no broker be unavailable, so kill could"),
        ((120, 3, ALL, 0, []), "the cluster has no brokers"),
    ],
)
def test_bad_input_is_one_clear_line(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ScheduleError) as info:
        make_schedule(1, *args)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_kinds() -> None:
    assert parse_kinds("LOSS, kill,kill") == ["kill", "loss"]
    assert parse_kinds(["isolate"]) == ["isolate"]


# ---------------------------------------------------------------------------------------------- controllers


def test_controllers_are_process_fault_targets_and_never_a_majority_is_down() -> None:
    hit: set[str] = set()
    isolated = 0
    for seed in range(30):
        s = make_schedule(seed, 300, 3, ALL, 1, [1, 2, 3], [1000, 1001, 1002])
        assert s.controllers == [1000, 1001, 1002] and s.max_controllers_down == 1
        for step in s.steps:
            if step.controllers:
                assert step.controller and not step.down and not step.brokers
                if step.kind == "isolate":
                    # The active controller, named when the step starts; it takes that voter down.
                    assert step.nodes == ["controller"] and step.controllers == {"controller"}
                    assert step.describe() == "isolate controller"
                    isolated += 1
                else:
                    assert step.kind in ("kill", "term", "pause")
                    assert step.nodes[0] in ("1000", "1001", "1002")
                hit |= step.controllers
        for t in range(3000):
            now = s.in_force_at(t / 10)
            # A voter down and a fault on the controllers' links (another step) never overlap; an
            # isolation runs alone.
            for x in now:
                assert not (x.controllers and any("controller" in y.nodes for y in now if y is not x))
                assert x.kind != "isolate" or now == [x]
            # Killed, stopped, paused and isolated voters together: never a majority.
            assert len(s.controllers_down_at(t / 10)) <= 1, (seed, t)
            assert len(s.down_at(t / 10)) <= 1, (seed, t)
    assert hit == {"1000", "1001", "1002", "controller"}
    assert isolated >= 10


def test_quorum_loss_only_when_allowed_and_targets_choose_the_nodes() -> None:
    lossy = make_schedule(5, 300, 1, "kill,pause", 1, [1, 2, 3], [1000, 1001, 1002], allow_quorum_loss=True)
    assert lossy.max_controllers_down == 2
    assert max(len(lossy.controllers_down_at(t / 10)) for t in range(3000)) == 2
    only_brokers = make_schedule(5, 300, 3, ALL, 1, [1, 2, 3], [1000, 1001, 1002], targets="brokers")
    assert only_brokers.controllers == [] and not any(s.controllers for s in only_brokers.steps)
    only_controllers = make_schedule(
        5, 300, 3, "kill,pause", 1, [1, 2, 3], [1000, 1001], targets="controllers"
    )
    # Two voters: a minority is none, so nothing can be taken down.
    assert only_controllers.max_controllers_down == 0 and not only_controllers.steps
    single = make_schedule(5, 300, 3, "kill", 1, [1, 2, 3], [1000, 1001, 1002], targets="controllers")
    assert single.steps and all(s.controllers and not s.brokers for s in single.steps)
    with pytest.raises(ScheduleError, match="unknown target"):
        make_schedule(5, 300, 3, "kill", 1, [1, 2, 3], [1000], targets="zookeeper")


def test_without_controllers_the_schedule_is_the_brokers_only_one() -> None:
    a = make_schedule(11, 120, 3, ALL, 1, [1, 2, 3])
    b = make_schedule(11, 120, 3, ALL, 1, [1, 2, 3], [1000], targets="brokers,controllers")
    # One voter: no minority to take down, so the same draws as without controllers.
    assert [x.describe() for x in a.steps] == [x.describe() for x in b.steps]
