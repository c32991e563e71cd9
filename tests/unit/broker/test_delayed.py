"""The purgatory (Kafka's DelayedOperationPurgatory) under trio's MockClock: expiry, check_and_complete,
completion exactly once; and the two delayed operations built on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
import trio
import trio.testing

from broker.delayed import DelayedOperation, DelayedOperationPurgatory
from broker.delayed_ops import (
    DelayedFetch,
    DelayedProduce,
    FetchParams,
    FetchPartitionStatus,
    ProducePartitionStatus,
)
from protocol.errors import Errors


class Op(DelayedOperation):
    """Completes when ``ready`` is set; records how it ended."""

    def __init__(self, delay_ms: int, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.completions = 0
        self.expirations = 0
        self.tries = 0

    def try_complete(self) -> bool:
        self.tries += 1
        return self.force_complete() if self.ready else False

    def on_complete(self) -> None:
        self.completions += 1

    def on_expiration(self) -> None:
        self.expirations += 1


@pytest.fixture
async def purgatory(mock_clock: trio.testing.MockClock) -> AsyncIterator[DelayedOperationPurgatory]:
    p = DelayedOperationPurgatory("Test")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(p.run)
        yield p
        nursery.cancel_scope.cancel()


async def advance(clock: trio.testing.MockClock, seconds: float) -> None:
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(seconds)
    await trio.testing.wait_all_tasks_blocked()


async def test_an_operation_that_can_complete_is_not_watched(purgatory: DelayedOperationPurgatory) -> None:
    op = Op(100, ready=True)
    assert purgatory.try_complete_else_watch(op, ["a"])
    assert op.completions == 1 and op.tries == 1
    assert purgatory.watched == 0
    assert purgatory.check_and_complete("a") == 0


async def test_expiry_at_the_deadline(
    purgatory: DelayedOperationPurgatory, mock_clock: trio.testing.MockClock
) -> None:
    op = Op(100)
    assert not purgatory.try_complete_else_watch(op, ["a"])
    assert op.tries == 2  # once before watching and once after (something may have happened between)
    await advance(mock_clock, 0.099)
    assert not op.is_completed
    await advance(mock_clock, 0.002)
    assert op.is_completed and op.completions == 1 and op.expirations == 1
    assert purgatory.expired == 1
    assert purgatory.check_and_complete("a") == 0
    assert purgatory.watched == 0


async def test_an_earlier_deadline_wakes_the_reaper(
    purgatory: DelayedOperationPurgatory, mock_clock: trio.testing.MockClock
) -> None:
    slow, fast = Op(10_000), Op(10)
    purgatory.try_complete_else_watch(slow, ["a"])
    await advance(mock_clock, 0.001)  # the reaper now sleeps until the slow deadline
    purgatory.try_complete_else_watch(fast, ["b"])
    await advance(mock_clock, 0.010)
    assert fast.expirations == 1 and not slow.is_completed
    await advance(mock_clock, 10.0)
    assert slow.expirations == 1 and purgatory.expired == 2


async def test_check_and_complete_completes_watched_operations_once(
    purgatory: DelayedOperationPurgatory, mock_clock: trio.testing.MockClock
) -> None:
    op = Op(1000)
    other = Op(1000)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    purgatory.try_complete_else_watch(other, ["b"])
    assert purgatory.check_and_complete("a") == 0  # not ready yet
    assert purgatory.watched == 3
    op.ready = True
    assert purgatory.check_and_complete("c") == 0  # nothing watched under c
    assert purgatory.check_and_complete("a") == 1
    assert purgatory.check_and_complete("b") == 0  # op is done; other is not ready
    assert op.completions == 1 and op.expirations == 0
    # Its deadline passes later: completed operations do not expire.
    await advance(mock_clock, 2.0)
    assert op.completions == 1 and op.expirations == 0
    assert other.expirations == 1 and purgatory.expired == 1


async def test_force_complete_happens_once(purgatory: DelayedOperationPurgatory) -> None:
    op = Op(1000)
    purgatory.try_complete_else_watch(op, ["a"])
    assert op.force_complete()
    assert not op.force_complete()
    op.ready = True
    assert purgatory.check_and_complete("a") == 0
    assert op.completions == 1


async def test_complete_all_at_shutdown(purgatory: DelayedOperationPurgatory) -> None:
    ops = [Op(1000 * (i + 1)) for i in range(3)]
    for i, op in enumerate(ops):
        purgatory.try_complete_else_watch(op, [i])
    ops[0].force_complete()
    purgatory.complete_all()
    assert [op.completions for op in ops] == [1, 1, 1]
    assert [op.expirations for op in ops] == [0, 1, 1]
    assert purgatory.watched == 0


# ------------------------------------------------------------------------------- DelayedProduce


def produce_op(
    check: Callable[[tuple[str, int], int], tuple[bool, Errors]],
    responses: list[dict[tuple[str, int], ProducePartitionStatus]],
) -> DelayedProduce:
    statuses = {
        ("t", 0): ProducePartitionStatus(required_offset=10, base_offset=5, log_start_offset=0),
        ("t", 1): ProducePartitionStatus(required_offset=3, base_offset=0, log_start_offset=0),
    }
    return DelayedProduce(500, statuses, check, lambda s: responses.append(dict(s)))


async def test_delayed_produce_completes_when_every_hw_passed(purgatory: DelayedOperationPurgatory) -> None:
    hw = {("t", 0): 0, ("t", 1): 0}
    responses: list[dict[tuple[str, int], ProducePartitionStatus]] = []
    op = produce_op(lambda tp, required: (hw[tp] >= required, Errors.NONE), responses)
    assert not purgatory.try_complete_else_watch(op, list(hw))
    hw[("t", 1)] = 3
    assert purgatory.check_and_complete(("t", 1)) == 0
    hw[("t", 0)] = 10
    assert purgatory.check_and_complete(("t", 0)) == 1
    [resp] = responses
    assert all(s.error == Errors.NONE and not s.acks_pending for s in resp.values())


async def test_delayed_produce_times_out_per_partition(
    purgatory: DelayedOperationPurgatory, mock_clock: trio.testing.MockClock
) -> None:
    hw = {("t", 0): 0, ("t", 1): 3}
    responses: list[dict[tuple[str, int], ProducePartitionStatus]] = []
    op = produce_op(lambda tp, required: (hw[tp] >= required, Errors.NONE), responses)
    purgatory.try_complete_else_watch(op, list(hw))
    await advance(mock_clock, 0.501)
    [resp] = responses
    assert resp[("t", 0)].error == Errors.REQUEST_TIMED_OUT
    assert resp[("t", 1)].error == Errors.NONE


async def test_delayed_produce_takes_the_first_error(purgatory: DelayedOperationPurgatory) -> None:
    responses: list[dict[tuple[str, int], ProducePartitionStatus]] = []
    op = produce_op(lambda tp, required: (False, Errors.NOT_LEADER_OR_FOLLOWER), responses)
    assert purgatory.try_complete_else_watch(op, [("t", 0), ("t", 1)])
    [resp] = responses
    assert {s.error for s in resp.values()} == {Errors.NOT_LEADER_OR_FOLLOWER}


# ------------------------------------------------------------------------------- DelayedFetch


async def test_delayed_fetch_waits_for_min_bytes_or_a_state_change(
    purgatory: DelayedOperationPurgatory, mock_clock: trio.testing.MockClock
) -> None:
    available: dict[tuple[str, int], int | None] = {("t", 0): 0, ("t", 1): 0}
    answered: list[FetchParams] = []
    params = FetchParams(replica_id=-1, max_wait_ms=500, min_bytes=100, max_bytes=1 << 20)
    for tp in available:
        params.partitions[tp] = FetchPartitionStatus(fetch_offset=0, current_leader_epoch=-1, max_bytes=60)
    op = DelayedFetch(params, lambda tp, status, follower: available[tp], answered.append)
    assert not purgatory.try_complete_else_watch(op, list(available))
    available[("t", 0)] = 80  # only 60 of them count (partition_max_bytes)
    assert purgatory.check_and_complete(("t", 0)) == 0
    available[("t", 1)] = 40
    assert purgatory.check_and_complete(("t", 1)) == 1
    assert answered == [params]

    # A partition that must be answered now (None: e.g. leadership moved) completes it at once.
    answered.clear()
    available = {("t", 0): 0, ("t", 1): 0}
    op = DelayedFetch(params, lambda tp, status, follower: available[tp], answered.append)
    purgatory.try_complete_else_watch(op, list(available))
    available[("t", 1)] = None
    assert purgatory.check_and_complete(("t", 1)) == 1

    # And nothing happening answers it at max_wait_ms.
    answered.clear()
    available = {("t", 0): 0, ("t", 1): 0}
    op = DelayedFetch(params, lambda tp, status, follower: available[tp], answered.append)
    purgatory.try_complete_else_watch(op, list(available))
    await advance(mock_clock, 0.499)
    assert answered == []
    await advance(mock_clock, 0.002)
    assert answered == [params]


async def test_operations_completed_early_do_not_pile_up_until_their_deadline() -> None:
    """10,000 acks=-1 style operations, each completed right after being parked: neither the deadline heap
    nor the watch lists may keep them (their records) until their 30 s deadline."""
    purgatory = DelayedOperationPurgatory("Produce", clock=lambda: 0.0)
    for i in range(10_000):
        op = Op(30_000)
        assert not purgatory.try_complete_else_watch(op, [("t", i % 4)])
        op.ready = True
        assert purgatory.check_and_complete(("t", i % 4)) == 1
    assert len(purgatory._heap) < 2 * 64 + 1
    assert purgatory.watched == 0


class ChainingOp(Op):
    """On completion does what a WriteTxnMarkers callback that writes offsets does: something happens to the
    same key (an append checks the key's watchers) and a new operation is watched under it."""

    def __init__(self, delay_ms: int, purgatory: DelayedOperationPurgatory, follow_up: Op) -> None:
        super().__init__(delay_ms)
        self.purgatory = purgatory
        self.follow_up = follow_up

    def on_complete(self) -> None:
        super().on_complete()
        self.purgatory.check_and_complete("a")
        self.purgatory.try_complete_else_watch(self.follow_up, ["a"])


async def test_an_operation_watched_from_a_completion_on_the_same_key_stays_watched(
    purgatory: DelayedOperationPurgatory,
) -> None:
    follow_up = Op(10_000)
    first = ChainingOp(10_000, purgatory, follow_up)
    other = Op(10_000)
    assert not purgatory.try_complete_else_watch(first, ["a"])
    assert not purgatory.try_complete_else_watch(other, ["a"])
    first.ready = True
    assert purgatory.check_and_complete("a") == 1
    assert first.completions == 1 and not follow_up.is_completed
    assert purgatory.watched == 2  # the follow-up and the other one, both still watched under "a"
    follow_up.ready = other.ready = True
    assert purgatory.check_and_complete("a") == 2
    assert follow_up.completions == 1 and other.completions == 1
    assert purgatory.watched == 0
