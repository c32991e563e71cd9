"""The fault kinds have one home, ``protocol.fault_kinds``: the command line's words, the chaos schedule's
kinds and the report's fault bands all follow its table, and a kind added to the table is scheduled by
chaos and drawn by the report with no other change."""

from __future__ import annotations

import random

import click
import pytest

import protocol
from cli.chaos_cmd import chaos
from cli.cluster import broker_kill, controller_kill
from cli.net_cmd import net
from lab.chaos import budget, schedule
from protocol import fault_kinds
from protocol.fault_kinds import FAULT_RULES, NETWORK, PAIR, FaultAction, FaultKind
from spark_jobs.fault_log import fault_bands
from spark_jobs.timeline import band_colour


def _option(command: click.Command, name: str) -> click.Option:
    return next(p for p in command.params if isinstance(p, click.Option) and p.name == name)


def test_the_command_line_offers_the_tables_kinds() -> None:
    # `isrsim net <kind>`: one command per network kind, beside heal and status.
    assert set(net.commands) == {*fault_kinds.NETWORK_KINDS, FaultAction.HEAL, "status"}
    # `isrsim chaos --faults`: every kind, in the table's order.
    assert _option(chaos, "faults").default == ",".join(FAULT_RULES)
    # `isrsim broker|controller kill --signal`: the signals of the kinds a restart ends.
    signals = {r.signal for r in FAULT_RULES.values() if r.ended_by == FaultAction.RESTART}
    for command in (broker_kill, controller_kill):
        choice = _option(command, "sig").type
        assert isinstance(choice, click.Choice) and set(choice.choices) == signals
    # Every word faults.jsonl holds is the enum's, and the front door hands out the same objects.
    assert set(fault_kinds.FAULT_ACTIONS) == {a.value for a in FaultAction}
    assert protocol.FAULT_RULES is FAULT_RULES and schedule.FAULT_KINDS is fault_kinds.FAULT_KINDS


def test_the_chaos_schedule_and_the_report_follow_the_table() -> None:
    made = schedule.make_schedule(7, 60, 2, ",".join(FAULT_RULES), 1, [1, 2, 3], [1000, 1001, 1002])
    assert made.faults == list(FAULT_RULES)
    for step in made.steps:
        rule = FAULT_RULES[step.kind]
        assert bool(step.down) == (rule.takes_down and not step.controller)
        assert len(step.nodes) == (2 if rule.family == NETWORK and rule.scope == PAIR else 1)
        assert not step.controller or rule.on_voters
        assert step.describe() == fault_kinds.fault_label(step.kind, step.nodes, step.params)
    # The report: each kind opens a band, ended by the action its rule names.
    for kind, rule in FAULT_RULES.items():
        nodes = ["1", "2"] if rule.family == NETWORK and rule.scope == PAIR else ["1"]
        records = [
            {"ts_ms": 1, "action": kind, "nodes": nodes, "params": {"ms": 5, "percent": 5}},
            {"ts_ms": 2, "action": rule.ended_by, "nodes": ["1"], "params": {}},
        ]
        band = fault_bands(records)[0]
        assert (band.instant, band.end_ms, band.ended_by) == (False, 2, rule.ended_by), kind
        assert band_colour(kind) == rule.colour


def test_a_kind_added_to_the_table_is_scheduled_and_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = FaultKind(
        "slow",
        NETWORK,
        FaultAction.HEAL,
        lambda nodes, params: f"slow {' <-> '.join(nodes)} {params['ms']} ms",
        "#123456",
        edit=lambda s, n, p, names: s.delay(n[0], n[1], int(p["ms"])),
        chaos_params=lambda rng: {"ms": 2000},
    )
    monkeypatch.setitem(FAULT_RULES, "slow", slow)
    made = schedule.make_schedule(3, 30, 2, "slow", 0, [1, 2, 3])
    assert made.steps and {s.kind for s in made.steps} == {"slow"}
    step = made.steps[0]
    assert step.params["ms"] == 2000 and step.describe().startswith("slow ")
    assert budget.taken_down(step) == set()  # it takes no broker down (its rule says so)
    rng = random.Random(0)
    assert slow.chaos_params(rng) == {"ms": 2000}
    records = [
        {"ts_ms": 10, "action": "slow", "nodes": ["1", "2"], "params": {"ms": 2000}},
        {"ts_ms": 20, "action": "heal", "nodes": ["2"], "params": {}},
    ]
    (band, heal) = fault_bands(records)
    assert (band.label, band.end_ms, band.ended_by, heal.instant) == (
        "slow 1 <-> 2 2000 ms",
        20,
        "heal",
        True,
    )
    assert band_colour("slow") == "#123456"
    with pytest.raises(schedule.ScheduleError, match="unknown fault kind 'fast'"):
        schedule.parse_kinds("fast")
