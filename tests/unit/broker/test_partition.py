"""``broker.partition.Partition`` with a fake clock and a real ``Log``: Kafka's IsrExpirationTest cases,
the high watermark rules, ISR expansion, leader epochs and the acks=-1 checks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from broker.partition import LeaderAndIsrState, Partition
from protocol.common import MockTime
from protocol.errors import Errors, KafkaError, OffsetOutOfRangeError
from protocol.records import build_simple_batch, iter_batches
from storage.checkpoint import EpochEntry
from storage.log import Log, LogConfig

LAG_MS = 100  # replica.lag.time.max.ms, as in Kafka's IsrExpirationTest
LEADER = 0
TP = ("t", 0)


@pytest.fixture
def clock() -> MockTime:
    return MockTime(1_000_000)


def make_partition(
    tmp_path: Path, clock: MockTime, *, min_isr: int = 1, high_watermark: int = 0, local: int = LEADER
) -> Partition:
    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig())
    return Partition(
        TP,
        local,
        log,
        clock_ms=clock,
        replica_lag_time_max_ms=LAG_MS,
        min_insync_replicas=min_isr,
        high_watermark=high_watermark,
    )


def state(epoch: int, isr: Sequence[int], replicas: Sequence[int] = (0, 1, 2), leader: int = LEADER) -> Any:
    return LeaderAndIsrState(leader=leader, leader_epoch=epoch, isr=list(isr), replicas=list(replicas))


def append(p: Partition, records: int, acks: int = 1) -> int:
    """Appends one batch of ``records`` as the leader; returns the new LEO."""
    p.append_records_to_leader(build_simple_batch([b"v"] * records), acks)
    return p.log_end_offset


def fetch(p: Partition, follower: int, offset: int, clock: MockTime) -> tuple[bool, object]:
    """A follower fetch at ``offset`` (it has every offset below it), as the replica manager records it."""
    return p.update_follower_fetch_state(follower, offset, 0, clock(), p.log_end_offset)


def leader_with_all_in_isr(tmp_path: Path, clock: MockTime, *, leo: int = 20, **kw: int) -> Partition:
    """Kafka's getPartitionWithAllReplicasInIsr: replicas and ISR {0, 1, 2}, leader 0, LEO ``leo``."""
    p = make_partition(tmp_path, clock, **kw)
    assert p.make_leader(state(1, [0, 1, 2]))
    if leo:
        append(p, leo)
    return p


# ------------------------------------------------------------------------------- IsrExpirationTest


def test_isr_expiration_for_stuck_followers(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    # The followers catch up to the leader's LEO - 1 and then stop fetching.
    fetch(p, 1, 19, clock)
    fetch(p, 2, 19, clock)
    assert p.out_of_sync_replicas(clock()) == {}
    assert p.maybe_shrink_isr() is None
    clock.sleep(LAG_MS + 50)
    assert set(p.out_of_sync_replicas(clock())) == {1, 2}
    change = p.maybe_shrink_isr()
    assert change is not None and change.old_isr == [0, 1, 2] and change.new_isr == [0]
    assert change.reason == "follower_lagging" and change.lagging == {1: LAG_MS + 50, 2: LAG_MS + 50}
    assert p.isr == [0]


def test_isr_expiration_if_no_fetch_request_made(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    assert p.out_of_sync_replicas(clock()) == {}
    clock.sleep(LAG_MS + 50)
    assert set(p.out_of_sync_replicas(clock())) == {1, 2}


def test_isr_expiration_for_slow_followers(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    # Fetches that never reach the end of the log: fine for replica.lag.time.max.ms, then out of sync.
    fetch(p, 1, 18, clock)
    clock.sleep(75)
    fetch(p, 1, 19, clock)  # reached the LEO the leader had at the previous fetch: caught up as of then
    fetch(p, 2, 20, clock)
    assert p.out_of_sync_replicas(clock()) == {}
    clock.sleep(75)
    assert set(p.out_of_sync_replicas(clock())) == {1}
    # A fetch to the end of the log brings it back in sync.
    fetch(p, 1, 20, clock)
    assert p.out_of_sync_replicas(clock()) == {}


def test_caught_up_follower_stays_in_sync_while_the_leader_is_idle(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    fetch(p, 1, 20, clock)
    fetch(p, 2, 20, clock)
    clock.sleep(10 * LAG_MS)  # no new data and no fetches: still at the leader's LEO
    assert p.out_of_sync_replicas(clock()) == {}
    assert p.maybe_shrink_isr() is None
    # New data arrives; a follower that does not fetch it falls out after the lag time.
    append(p, 5)
    fetch(p, 1, 25, clock)
    clock.sleep(LAG_MS + 1)
    assert set(p.out_of_sync_replicas(clock())) == {2}


def test_follower_that_fetched_to_the_leo_stays_even_after_a_long_pause(
    tmp_path: Path, clock: MockTime
) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    fetch(p, 1, 15, clock)
    clock.sleep(LAG_MS - 1)
    fetch(p, 1, 20, clock)  # reached the LEO: caught up now
    clock.sleep(LAG_MS - 1)
    assert 1 not in p.out_of_sync_replicas(clock())


# ------------------------------------------------------------------------------- high watermark


def test_high_watermark_is_the_smallest_leo_in_the_isr(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    assert p.high_watermark == 0  # the followers' LEOs are unknown
    moved, _ = fetch(p, 1, 10, clock)
    assert not moved and p.high_watermark == 0
    moved, _ = fetch(p, 2, 15, clock)
    assert moved and p.high_watermark == 10
    fetch(p, 1, 20, clock)
    assert p.high_watermark == 15
    fetch(p, 2, 20, clock)
    assert p.high_watermark == 20


def test_high_watermark_never_decreases(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    fetch(p, 1, 15, clock)
    fetch(p, 2, 15, clock)
    assert p.high_watermark == 15
    moved, _ = fetch(p, 1, 5, clock)  # a follower that went back (it truncated)
    assert not moved and p.high_watermark == 15
    p.set_isr([0, 1, 2], partition_epoch=2)
    p.maybe_increment_leader_hw()
    assert p.high_watermark == 15


def test_high_watermark_ignores_followers_outside_the_isr(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock)
    fetch(p, 1, 20, clock)
    fetch(p, 2, 5, clock)
    assert p.high_watermark == 5
    clock.sleep(LAG_MS + 1)
    fetch(p, 1, 20, clock)
    change = p.maybe_shrink_isr()
    assert change is not None and change.new_isr == [0, 1]
    assert p.high_watermark == 20


def test_high_watermark_frozen_while_isr_below_min_insync_replicas(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock, min_isr=2)
    fetch(p, 1, 10, clock)
    fetch(p, 2, 10, clock)
    assert p.high_watermark == 10
    clock.sleep(LAG_MS + 1)
    change = p.maybe_shrink_isr()
    assert change is not None and change.new_isr == [0]
    assert p.is_under_min_isr
    # ISR {0} alone would put the HW at the leader's LEO (20): under min ISR it stays (KIP-966).
    assert p.high_watermark == 10
    append(p, 5)  # acks=1 is still accepted
    assert p.log_end_offset == 25 and p.high_watermark == 10
    assert not p.maybe_increment_leader_hw()
    # Follower 1 catches up and rejoins: the ISR is back at min.insync.replicas and the HW moves.
    moved, change = fetch(p, 1, 25, clock)
    assert change is not None and change.new_isr == [0, 1]
    assert moved and p.high_watermark == 25


def test_follower_high_watermark_is_clamped_to_its_log(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, local=1)
    assert p.make_follower(state(1, [0, 1, 2]))
    p.log.append_as_follower(build_simple_batch([b"x"] * 10, partition_leader_epoch=1))
    assert p.update_follower_high_watermark(50) == 10
    assert p.update_follower_high_watermark(4) == 4
    p.truncate_to(0)
    assert p.high_watermark == 0


# ------------------------------------------------------------------------------- ISR expansion


def test_isr_expansion_requires_the_high_watermark_and_the_epoch_start(
    tmp_path: Path, clock: MockTime
) -> None:
    # A log of 20 records and a checkpointed HW of 10; leader in epoch 1 from offset 20, ISR {0, 1}.
    p = make_partition(tmp_path, clock, high_watermark=0)
    p.make_leader(state(0, [0]))
    append(p, 20)
    p = Partition(TP, LEADER, p.log, clock_ms=clock, replica_lag_time_max_ms=LAG_MS, min_insync_replicas=1,
                  high_watermark=10)  # fmt: skip
    p.make_leader(state(1, [0, 1]))
    assert p.leader_epoch_start_offset == 20
    assert p.high_watermark == 10  # follower 1's LEO is unknown: the HW stays
    # Follower 2, outside the ISR, below the HW: stays out.
    _, change = fetch(p, 2, 5, clock)
    assert change is None and p.isr == [0, 1]
    # At the HW but below the start of this leader's epoch: still out (it may hold a divergent tail).
    _, change = fetch(p, 2, 15, clock)
    assert change is None and p.isr == [0, 1]
    assert not p.is_follower_in_sync_for_expansion(2)
    # At the epoch start offset: in.
    _, change = fetch(p, 2, 20, clock)
    assert change is not None and change.old_isr == [0, 1] and change.new_isr == [0, 1, 2]
    assert change.reason == "follower_caught_up"


def test_only_assigned_replicas_join_the_isr(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock)
    p.make_leader(state(1, [0], replicas=[0, 1]))
    append(p, 5)
    moved, change = p.update_follower_fetch_state(7, 5, 0, clock(), p.log_end_offset)
    assert change is None and not moved and p.isr == [0]
    _, change = fetch(p, 1, 5, clock)
    assert change is not None and p.isr == [0, 1]


def test_followers_not_in_the_isr_do_not_hold_back_a_re_elected_leaders_hw(
    tmp_path: Path, clock: MockTime
) -> None:
    # Kafka's resetReplicaState: on a new leader epoch, a follower outside the new ISR gets
    # lastCaughtUpTime 0, so it is not counted as "about to join" when the HW is computed.
    p = leader_with_all_in_isr(tmp_path, clock)
    fetch(p, 1, 20, clock)
    fetch(p, 2, 20, clock)
    append(p, 10)
    fetch(p, 1, 30, clock)
    fetch(p, 2, 22, clock)  # recently caught up (at its previous fetch), but behind
    assert p.high_watermark == 22
    p.make_leader(state(2, [0, 1]))  # same leader, new epoch; 2 left the ISR
    assert p.high_watermark == 30
    append(p, 5)
    fetch(p, 1, 35, clock)
    assert p.high_watermark == 35


# ------------------------------------------------------------------------------- leader epochs


def test_make_leader_assigns_the_new_epoch_at_the_leo(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock)
    assert p.make_leader(state(1, [0]))
    cache = p.log.leader_epoch_cache
    assert cache.entries() == [EpochEntry(1, 0)]
    append(p, 7)
    assert p.make_leader(state(3, [0])) is False  # was already the leader
    assert p.leader_epoch == 3 and p.leader_epoch_start_offset == 7
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 7)]
    append(p, 3)
    batches = [h for _, h in iter_batches(p.log.read(7, 1 << 20))]
    assert [h.partition_leader_epoch for h in batches] == [3]
    # The same epoch again changes nothing.
    p.make_leader(state(3, [0]))
    assert p.leader_epoch_start_offset == 7 and cache.entries()[-1] == EpochEntry(3, 7)
    # The epoch survives a reopen of the log (leader-epoch-checkpoint).
    reopened = Log.open(tmp_path / "t-0", "t", 0, LogConfig())
    assert reopened.leader_epoch_cache.entries() == [EpochEntry(1, 0), EpochEntry(3, 7)]


def test_make_follower_reports_a_change_of_leader_or_epoch(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, local=1)
    assert p.make_follower(state(1, [0, 1], leader=0))
    assert not p.make_follower(state(1, [0, 1], leader=0))
    assert p.make_follower(state(2, [0, 1], leader=0))
    assert p.make_follower(state(3, [0, 1], leader=2))
    assert p.leader_id == 2 and not p.is_leader and p.leader_epoch_start_offset is None


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, Errors.NONE),  # no epoch: not checked
        (4, Errors.FENCED_LEADER_EPOCH),
        (5, Errors.NONE),
        (6, Errors.UNKNOWN_LEADER_EPOCH),
    ],
)
def test_check_current_leader_epoch(
    tmp_path: Path, clock: MockTime, requested: int, expected: Errors
) -> None:
    p = make_partition(tmp_path, clock)
    p.make_leader(state(5, [0]))
    assert p.check_current_leader_epoch(requested) == expected


def test_epoch_is_checked_before_leadership(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, local=1)
    p.make_follower(state(5, [0, 1], leader=0))
    with pytest.raises(KafkaError) as fenced:
        p.check_local_log(4, require_leader=True)
    assert fenced.value.error == Errors.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaError) as unknown:
        p.check_local_log(6, require_leader=True)
    assert unknown.value.error == Errors.UNKNOWN_LEADER_EPOCH
    with pytest.raises(KafkaError) as not_leader:
        p.check_local_log(5, require_leader=True)
    assert not_leader.value.error == Errors.NOT_LEADER_OR_FOLLOWER
    p.check_local_log(5, require_leader=False)  # a follower serves debug reads


def test_last_offset_for_leader_epoch(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock)
    p.make_leader(state(1, [0]))
    append(p, 10)
    p.make_leader(state(3, [0]))
    append(p, 5)
    assert p.last_offset_for_leader_epoch(-1, 1, True) == (Errors.NONE, 1, 10)
    assert p.last_offset_for_leader_epoch(-1, 2, True) == (Errors.NONE, 1, 10)
    assert p.last_offset_for_leader_epoch(-1, 3, True) == (Errors.NONE, 3, 15)
    assert p.last_offset_for_leader_epoch(2, 3, True) == (Errors.FENCED_LEADER_EPOCH, -1, -1)


# ------------------------------------------------------------------------------- produce and reads


def test_acks_all_below_min_insync_replicas_is_refused(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, min_isr=2)
    p.make_leader(state(1, [0], replicas=[0, 1]))
    with pytest.raises(KafkaError) as exc:
        append(p, 5, acks=-1)
    assert exc.value.error == Errors.NOT_ENOUGH_REPLICAS
    assert p.log_end_offset == 0, "nothing is appended"
    assert append(p, 5, acks=1) == 5


def test_append_on_a_follower_is_refused(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, local=1)
    p.make_follower(state(1, [0, 1], leader=0))
    with pytest.raises(KafkaError) as exc:
        append(p, 1)
    assert exc.value.error == Errors.NOT_LEADER_OR_FOLLOWER


def test_check_enough_replicas_reached(tmp_path: Path, clock: MockTime) -> None:
    p = make_partition(tmp_path, clock, min_isr=2)
    p.make_leader(state(1, [0, 1], replicas=[0, 1]))
    required = append(p, 20, acks=-1)
    assert p.check_enough_replicas_reached(required) == (False, Errors.NONE)
    fetch(p, 1, 10, clock)
    assert p.check_enough_replicas_reached(required) == (False, Errors.NONE)
    fetch(p, 1, 20, clock)
    assert p.check_enough_replicas_reached(required) == (True, Errors.NONE)
    # Past the HW, but the ISR shrank below min.insync.replicas since: Kafka's
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    p.set_isr([0], partition_epoch=1)
    assert p.check_enough_replicas_reached(required) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.make_follower(state(2, [1], replicas=[0, 1], leader=1))
    assert p.check_enough_replicas_reached(required) == (False, Errors.NOT_LEADER_OR_FOLLOWER)


def test_consumer_reads_stop_at_the_high_watermark(tmp_path: Path, clock: MockTime) -> None:
    p = leader_with_all_in_isr(tmp_path, clock, leo=0)
    append(p, 10)
    append(p, 10)
    fetch(p, 1, 10, clock)
    fetch(p, 2, 10, clock)
    assert p.high_watermark == 10
    consumer = p.read_records(0, -1, 1 << 20, from_follower=False)
    assert [h.base_offset for _, h in iter_batches(consumer.records)] == [0]
    assert p.read_records(10, -1, 1 << 20, from_follower=False).records == b""
    follower = p.read_records(0, -1, 1 << 20, from_follower=True)
    assert [h.base_offset for _, h in iter_batches(follower.records)] == [0, 10]
    for offset in (-1, 21):
        with pytest.raises(OffsetOutOfRangeError):
            p.read_records(offset, -1, 1 << 20, from_follower=True)


def test_maximal_isr_counts_a_pending_expansion_but_not_a_pending_shrink(
    tmp_path: Path, clock: MockTime
) -> None:
    """Managed mode (KIP-497): ISR changes are proposals until the controller commits them; meanwhile the HW
    is computed over the maximal ISR (Kafka's PendingExpandIsr / PendingShrinkIsr)."""
    p = make_partition(tmp_path, clock)
    assert p.make_leader(state(1, [0, 1]))
    proposals: list[list[int]] = []
    p.isr_proposer = lambda _p, isr, _reason: proposals.append(isr) is None
    append(p, 5)
    fetch(p, 1, 5, clock)
    assert fetch(p, 2, 5, clock)[1] is None  # follower 2 caught up: proposed, not applied
    assert proposals == [[0, 1, 2]] and p.isr == [0, 1]
    assert p.pending_isr == [0, 1, 2] and p.maximal_isr == [0, 1, 2]
    assert not p.set_isr([0, 1, 2], 1)  # committed
    assert p.pending_isr is None and p.maximal_isr == [0, 1, 2]

    clock.sleep(LAG_MS + 1)
    append(p, 1)
    fetch(p, 1, 6, clock)
    assert p.maybe_shrink_isr() is None  # follower 2 lags: a proposal to drop it
    assert proposals[-1] == [0, 1] and p.pending_isr == [0, 1]
    assert p.maximal_isr == [0, 1, 2]  # it still counts until the controller commits the shrink
    assert p.high_watermark == 5  # so the HW waits for follower 2 (at 5), not only for follower 1 (at 6)
