"""``--max-down`` while chaos runs (lab.chaos.budget): a broker out of service after its fault ended (fenced
by the controller, not yet back in every ISR) still counts, so ``--max-down 1`` never puts a second broker
out of the ISR by the chaos's own doing."""

from __future__ import annotations

from lab.chaos.budget import ServiceView, blocked, brokers_out, still_recovering, taken_down
from lab.chaos.schedule import FaultStep

REPLICAS = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


def step(kind: str, *nodes: str, index: int = 0, **params: object) -> FaultStep:
    down_kinds = ("kill", "term", "pause", "partition", "isolate")
    return FaultStep(
        index, kind, 0.0, 4.0, list(nodes), dict(params), [nodes[0]] if kind in down_kinds else []
    )


def view(fenced: set[str] = frozenset(), out: dict[int, int] | None = None) -> ServiceView:
    """``out``: partition -> the broker missing from its ISR."""
    isr = {p: [b for b in rs if (out or {}).get(p) != b] for p, rs in REPLICAS.items()}
    return ServiceView(fenced=frozenset(fenced), replicas=REPLICAS, isr=isr)


def test_a_fenced_broker_counts_after_its_pause_ended() -> None:
    """The issue's case: broker 2 was paused and resumed, but the controller still has it fenced; a pause
    of broker 3 must wait."""
    pause2, pause3 = step("pause", "2"), step("pause", "3", index=1)
    recovering = taken_down(pause2)
    now = view(fenced={"2"}, out={0: 2, 1: 2, 2: 2})
    out = brokers_out([], recovering, now)
    assert out == {"2": "fenced by the controller"}
    why = blocked(pause3, out, max_down=1)
    assert why is not None and "--max-down 1" in why and "broker 2: fenced by the controller" in why
    # Unfenced but still catching up: out of partition 1's ISR, so still out of service.
    now = view(out={1: 2})
    assert brokers_out([], still_recovering(recovering, now), now) == {"2": "not yet back in every ISR"}
    assert blocked(pause3, brokers_out([], recovering, now), 1) is not None
    # Back in every ISR: it no longer counts, and the pause of 3 may start.
    now = view()
    assert still_recovering(recovering, now) == set()
    assert blocked(pause3, brokers_out([], set(), now), 1) is None


def test_every_way_of_being_down_counts() -> None:
    kill, isolate = step("kill", "1"), step("isolate", "2", index=1)
    cut = step("partition", "3", "controller", index=2, one_way=True)
    assert brokers_out([kill, isolate, cut], set(), view()) == {"1": "kill 1", "2": "isolate 2",
                                                                "3": "partition 3 -> controller"}  # fmt: skip
    assert blocked(step("term", "3"), brokers_out([kill], set(), view()), 2) is None
    assert blocked(step("term", "3"), brokers_out([kill, isolate], set(), view()), 2) is not None
    # A broker the controller fenced for no fault of the chaos's still takes a place.
    assert blocked(step("kill", "1"), brokers_out([], set(), view(fenced={"3"})), 1) is not None


def test_faults_that_take_nobody_down_never_wait() -> None:
    everyone = brokers_out([step("kill", "1")], {"2"}, view(fenced={"2", "3"}))
    assert blocked(step("delay", "1", "2", ms=100, jitter_ms=20), everyone, 1) is None
    assert blocked(step("loss", "2", "clients", percent=10, one_way=True), everyone, 1) is None


def test_a_recovering_broker_out_of_an_isr_for_another_reason_is_not_the_chaos_doing() -> None:
    """Only brokers a fault of the run took down count as recovering; any broker out of an ISR that was
    not (a slow follower, say) does not block a fault."""
    now = view(out={0: 3})
    assert brokers_out([], set(), now) == {}
    assert brokers_out([], {"3"}, now) == {"3": "not yet back in every ISR"}
    # A partition between two brokers leaves both to recover (each side's ISRs lose the other).
    assert taken_down(step("partition", "1", "2")) == {"1", "2"}
    assert taken_down(step("delay", "1", "2", ms=50, jitter_ms=10)) == set()


def test_no_answer_from_the_controller_keeps_every_recovering_broker_out() -> None:
    unknown = ServiceView(known=False)
    assert still_recovering({"2"}, unknown) == {"2"}
    out = brokers_out([], {"2"}, unknown)
    assert list(out) == ["2"] and "did not answer" in out["2"]
    assert blocked(step("kill", "3"), out, 1) is not None
    assert brokers_out([], set(), unknown) == {}  # with nothing recovering, nothing is held back
