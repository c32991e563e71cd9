"""``broker.replica_manager.ReplicaManager`` without sockets, after Kafka's ReplicaManagerTest: real logs
in ``tmp_path``, a ``MockTime`` clock, a fetcher manager that records its calls, and the journal read back
from disk (what the Spark job reads)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from broker import replica_manager as rm_module
from broker.delayed_ops import FetchParams, FetchPartitionStatus, ProducePartitionStatus
from broker.partition import LeaderAndIsrState
from broker.replica_manager import FetchPartitionResult
from protocol.api_keys import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from protocol.common import TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.records import build_simple_batch
from protocol.replication import FetchStateView, InitialFetchState
from storage import checkpoint

from .broker_support import LAG_MS, LOCAL, TP, Broker, batch, endpoint, record_count

FOLLOWER = 1


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


def produce(b: Broker, acks: int, count: int, tp: TopicPartition = TP) -> list[ProducePartitionStatus]:
    """Appends one batch of ``count`` records; returns what the producer was answered (nothing yet while
    acks=-1 waits)."""
    answers: list[ProducePartitionStatus] = []
    b.rm.append_records(30_000, acks, {tp: batch(count)}, lambda statuses: answers.append(statuses[tp]))
    return answers


def fetch(
    b: Broker, replica_id: int, offset: int, *, current_leader_epoch: int = -1, tp: TopicPartition = TP
) -> FetchPartitionResult:
    results: list[dict[TopicPartition, FetchPartitionResult]] = []
    params = FetchParams(replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    params.partitions[tp] = FetchPartitionStatus(offset, current_leader_epoch, 1 << 20)
    b.rm.fetch_messages(params, results.append)
    [result] = results
    return result[tp]


def only(events: list[dict[str, object]]) -> dict[str, object]:
    assert len(events) == 1, events
    return events[0]


# ------------------------------------------------------------------------------- LEADER_AND_ISR


def test_become_leader_journals_leadership_and_the_epoch_it_assigned(broker: Broker) -> None:
    assert broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1]) == (Errors.NONE, {TP: Errors.NONE})
    partition = broker.rm.partitions[TP]
    assert partition.is_leader and partition.leader_epoch == 1 and partition.isr == [0, 1]
    assert broker.fetchers.removed == [TP] and broker.fetchers.added == {}
    meta = broker.metadata_cache.partitions[TP]
    assert (meta.leader, meta.leader_epoch, meta.isr, meta.replicas) == (0, 1, [0, 1], [0, 1])
    leader = only(broker.journal_events("became_leader"))
    assert leader["topic"] == "t" and leader["partition"] == 0 and leader["broker_id"] == LOCAL
    assert (leader["leader_epoch"], leader["leader_id"], leader["isr"], leader["replicas"]) == (
        1,
        0,
        [0, 1],
        [0, 1],
    )
    assert (leader["log_end_offset"], leader["high_watermark"]) == (0, 0)
    assert only(broker.journal_events("epoch_assigned"))["start_offset"] == 0

    # Re-elected in a later epoch with data: the new epoch starts at the LEO, in the cache and the journal.
    produce(broker, 1, 3)
    broker.leader_and_isr(LOCAL, 2, [0], [0, 1])
    assert partition.log.leader_epoch_cache.epoch_for_offset(3) == 2
    assigned = broker.journal_events("epoch_assigned")[-1]
    assert (assigned["leader_epoch"], assigned["start_offset"]) == (2, 3)


def test_become_follower_starts_fetching_at_the_leo_of_a_log_with_leader_epochs(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    produce(broker, 1, 3)
    assert broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1]) == (Errors.NONE, {TP: Errors.NONE})
    partition = broker.rm.partitions[TP]
    assert not partition.is_leader and partition.leader_id == FOLLOWER and partition.leader_epoch == 2
    assert broker.fetchers.added == {TP: InitialFetchState(endpoint(FOLLOWER), 2, 3)}
    follower = only(broker.journal_events("became_follower"))
    assert (follower["leader_epoch"], follower["leader_id"], follower["log_end_offset"]) == (2, FOLLOWER, 3)


def test_become_follower_without_leader_epochs_starts_at_the_high_watermark(tmp_path: Path) -> None:
    # A log written before leader epochs (KIP-101): nothing to truncate by, so fetching starts at the HW.
    first = Broker(tmp_path)
    first.log_manager.get_or_create_log(TP).append_as_leader(batch(5), -1)
    first.log_manager.shutdown({TP: 2})
    restarted = Broker(tmp_path)
    restarted.leader_and_isr(FOLLOWER, 3, [1], [0, 1])
    assert restarted.fetchers.added == {TP: InitialFetchState(endpoint(FOLLOWER), 3, 2)}


def test_become_follower_of_a_leader_not_known_alive_does_not_fetch_yet(broker: Broker) -> None:
    state = LeaderAndIsrState(FOLLOWER, 1, [1], [0, 1])
    assert broker.rm.become_leader_or_follower(1, 1, [(TP, state)], live_leaders=[]) == (
        Errors.NONE,
        {TP: Errors.NONE},
    )
    assert broker.rm.partitions[TP].leader_id == FOLLOWER
    assert broker.fetchers.added == {}


def test_stale_controller_epoch_is_refused_whole(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1], controller_epoch=5)
    error, errors = broker.leader_and_isr(FOLLOWER, 2, [1], [0, 1], controller_epoch=4)
    assert error == Errors.STALE_CONTROLLER_EPOCH == 11
    assert errors == {TP: Errors.STALE_CONTROLLER_EPOCH}
    assert broker.rm.partitions[TP].is_leader and broker.rm.partitions[TP].leader_epoch == 1
    assert broker.journal_events("became_follower") == []


def test_a_higher_controller_epoch_is_announced_to_the_controller_listeners(broker: Broker) -> None:
    # A new active controller: the broker's link to the controller follows whoever raised the epoch.
    seen: list[tuple[int, int]] = []
    broker.rm.controller_listeners.append(lambda cid, epoch: seen.append((cid, epoch)))
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1], controller_epoch=5)
    broker.leader_and_isr(LOCAL, 2, [0], [0, 1], controller_epoch=5)  # same epoch: nothing new
    broker.leader_and_isr(LOCAL, 3, [0], [0, 1], controller_epoch=4)  # stale: refused, not announced
    assert broker.rm.update_metadata(1001, 7, [], []) == Errors.NONE
    assert broker.rm.stop_replicas(1001, 6, []) == (Errors.STALE_CONTROLLER_EPOCH, {})
    assert [epoch for _, epoch in seen] == [5, 7]
    assert seen[-1] == (1001, 7)


def test_leader_epoch_not_newer_is_stale_per_partition(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 3, [0], [0, 1])
    other: TopicPartition = ("t", 1)
    error, errors = broker.rm.become_leader_or_follower(
        1,
        1,
        [
            (TP, LeaderAndIsrState(FOLLOWER, 3, [1], [0, 1])),  # same epoch: not newer
            (other, LeaderAndIsrState(LOCAL, 1, [0], [0, 1])),
        ],
        [endpoint(FOLLOWER)],
    )
    assert error == Errors.NONE
    assert errors == {TP: Errors.STALE_CONTROLLER_EPOCH, other: Errors.NONE}
    assert broker.rm.partitions[TP].is_leader
    assert broker.rm.partitions[other].is_leader


def test_isr_shrink_in_the_same_leader_epoch_is_applied_by_the_leader(broker: Broker) -> None:
    # KRaft (KAFKA-15021): the controller shrinks an ISR without a new leader epoch, only a newer partition
    # epoch. The leader applies it in place: no epoch cached, no new leadership, and a waiting acks=-1
    # produce completes once the lagging follower is out of the ISR.
    broker.leader_and_isr(LOCAL, 3, [0, 1], [0, 1], partition_epoch=5)
    answers = produce(broker, -1, 2)
    assert answers == []
    assert broker.leader_and_isr(LOCAL, 3, [0], [0, 1], partition_epoch=6) == (Errors.NONE, {TP: Errors.NONE})
    partition = broker.rm.partitions[TP]
    assert (partition.leader_epoch, partition.partition_epoch, partition.isr) == (3, 6, [0])
    assert broker.metadata_cache.partitions[TP].isr == [0]
    [answer] = answers
    assert (answer.error, answer.base_offset) == (Errors.NONE, 0)
    assert [(e.epoch, e.start_offset) for e in partition.log.leader_epoch_cache.entries()] == [(3, 0)]
    assert len(broker.journal_events("became_leader")) == 1
    assert len(broker.journal_events("epoch_assigned")) == 1
    change = only(broker.journal_events("isr_changed"))
    assert (change["old_isr"], change["isr"], change["leader_epoch"]) == ([0, 1], [0], 3)


def test_isr_change_in_the_same_leader_epoch_leaves_a_follower_fetching(broker: Broker) -> None:
    broker.leader_and_isr(FOLLOWER, 2, [1, 0, 2], [1, 0, 2], partition_epoch=4)
    assert broker.fetchers.added == {TP: InitialFetchState(endpoint(FOLLOWER), 2, 0)}
    broker.fetchers.added.clear()
    removed = list(broker.fetchers.removed)
    assert broker.leader_and_isr(FOLLOWER, 2, [1, 0], [1, 0, 2], partition_epoch=5) == (
        Errors.NONE,
        {TP: Errors.NONE},
    )
    partition = broker.rm.partitions[TP]
    assert (partition.leader_id, partition.leader_epoch, partition.partition_epoch) == (FOLLOWER, 2, 5)
    assert partition.isr == [1, 0]
    # No fetcher restart, no truncation, no new became_follower.
    assert broker.fetchers.added == {} and broker.fetchers.removed == removed
    assert len(broker.journal_events("became_follower")) == 1
    assert broker.journal_events("truncated") == []


def test_alter_partition_answer_older_than_a_same_epoch_leader_and_isr_is_not_applied(broker: Broker) -> None:
    # Managed: the leader proposed an expansion; before its answer (partition epoch 6) arrives, the
    # controller's own shrink (partition epoch 7, same leader epoch) came in a LEADER_AND_ISR.
    proposals: list[tuple[int, list[int], int, object]] = []

    def submit(tp: TopicPartition, epoch: int, isr: list[int], pe: int, cb: object) -> bool:
        proposals.append((epoch, isr, pe, cb))
        return True

    broker.rm.enable_alter_partition(submit)
    broker.leader_and_isr(LOCAL, 3, [0], [0, 1, 2], partition_epoch=5)
    produce(broker, 1, 2)
    fetch(broker, FOLLOWER, 2)  # caught up: the leader proposes [0, 1]
    [(_, proposed, _, callback)] = proposals
    assert proposed == [0, 1]
    broker.leader_and_isr(LOCAL, 3, [0, 2], [0, 1, 2], partition_epoch=7)
    callback(TP, Errors.NONE, 3, [0, 1], 6)  # type: ignore[operator]
    partition = broker.rm.partitions[TP]
    assert (partition.isr, partition.partition_epoch) == ([0, 2], 7)


def test_same_leader_epoch_is_stale_unless_the_partition_epoch_is_newer_and_the_leader_the_same(
    broker: Broker,
) -> None:
    broker.leader_and_isr(LOCAL, 3, [0, 1], [0, 1], partition_epoch=5)
    for leader, partition_epoch in ((LOCAL, 5), (LOCAL, 4), (FOLLOWER, 6)):
        error, errors = broker.leader_and_isr(leader, 3, [0], [0, 1], partition_epoch=partition_epoch)
        assert (error, errors) == (Errors.NONE, {TP: Errors.STALE_CONTROLLER_EPOCH})
    # An older leader epoch is refused whatever its partition epoch.
    assert broker.leader_and_isr(LOCAL, 2, [0], [0, 1], partition_epoch=9)[1] == {
        TP: Errors.STALE_CONTROLLER_EPOCH
    }
    partition = broker.rm.partitions[TP]
    assert (partition.leader_epoch, partition.partition_epoch, partition.isr) == (3, 5, [0, 1])
    assert partition.is_leader


def test_partition_this_broker_is_not_a_replica_of_is_unknown_and_gets_no_log(broker: Broker) -> None:
    error, errors = broker.leader_and_isr(FOLLOWER, 1, [1, 2], [1, 2])
    assert (error, errors) == (Errors.NONE, {TP: Errors.UNKNOWN_TOPIC_OR_PARTITION})
    assert TP not in broker.rm.partitions
    assert not (broker.log_dir / "t-0").exists()


def test_leadership_lost_answers_a_waiting_acks_all_produce(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    answers = produce(broker, -1, 2)
    assert answers == []  # waiting for follower 1
    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    [answer] = answers
    assert answer.error == Errors.NOT_LEADER_OR_FOLLOWER


# ---------------------------------------------------------------------------------- STOP_REPLICA


def test_stop_replica_with_an_older_leader_epoch_is_fenced(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 3, [0], [0])
    assert broker.rm.stop_replicas(1, 1, [(TP, 2, False)]) == (Errors.NONE, {TP: Errors.FENCED_LEADER_EPOCH})
    assert TP in broker.rm.partitions
    assert broker.journal_events("partition_stopped") == []


def test_stop_replica_keeps_the_log_and_its_high_watermark(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 3, [0], [0])
    produce(broker, 1, 4)
    broker.fetchers.removed.clear()
    assert broker.rm.stop_replicas(1, 1, [(TP, 3, False)]) == (Errors.NONE, {TP: Errors.NONE})
    assert TP not in broker.rm.partitions
    assert broker.fetchers.removed == [TP]
    assert (broker.log_dir / "t-0").is_dir()
    assert broker.rm.high_watermarks() == {TP: 4}
    assert only(broker.journal_events("partition_stopped"))["deleted"] is False


def test_stop_replica_of_many_partitions_deletes_them_a_few_per_step(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STOP_REPLICA as the handler runs it: the partitions' logs are deleted PARTITIONS_STOPPED_PER_STEP at
    a time with the loop given back in between; the answer is the one for the whole request."""
    monkeypatch.setattr(rm_module, "PARTITIONS_STOPPED_PER_STEP", 2)
    tps = [("t", p) for p in range(7)]
    for tp in tps:
        broker.leader_and_isr(LOCAL, 3, [0], [0], tp=tp)
    steps = 0

    async def stop() -> tuple[Errors, dict[TopicPartition, Errors]]:
        nonlocal steps

        async def count_steps() -> None:
            nonlocal steps
            while True:
                await trio.sleep(0)
                steps += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(count_steps)
            states = [(tp, 3, True) for tp in tps[:6]] + [(tps[6], 2, True)]
            answer = await broker.rm.stop_replicas_async(1, 1, states)
            nursery.cancel_scope.cancel()
        return answer

    error, errors = trio.run(stop)
    assert error == Errors.NONE
    assert errors == {**dict.fromkeys(tps[:6], Errors.NONE), tps[6]: Errors.FENCED_LEADER_EPOCH}
    assert [tp for tp in tps if (broker.log_dir / f"t-{tp[1]}").exists()] == [tps[6]]
    assert steps >= 2  # four steps of two partitions, the loop served between them


@pytest.mark.parametrize("leader_epoch", [-2, -1, 3, 4])
def test_stop_replica_with_delete_removes_log_metadata_and_high_watermark(
    broker: Broker, leader_epoch: int
) -> None:
    broker.leader_and_isr(LOCAL, 3, [0], [0])
    produce(broker, 1, 4)
    assert broker.rm.stop_replicas(1, 1, [(TP, leader_epoch, True)]) == (Errors.NONE, {TP: Errors.NONE})
    assert not (broker.log_dir / "t-0").exists()
    assert TP not in broker.metadata_cache.partitions
    assert broker.rm.high_watermarks() == {}
    assert only(broker.journal_events("partition_stopped"))["deleted"] is True
    broker.rm.state_listener.flush_offsets()
    assert broker.journal_events("offsets") == []  # a deleted partition's pending offsets are forgotten


# ------------------------------------------------------------------------------------------ produce


def test_produce_acks_1_is_answered_at_once_with_its_offsets(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    [first] = produce(broker, 1, 3)
    [second] = produce(broker, 1, 2)
    assert (first.error, first.base_offset, second.base_offset) == (Errors.NONE, 0, 3)
    assert broker.rm.partitions[TP].log_end_offset == 5


def test_produce_acks_all_below_min_isr_is_refused_without_appending(tmp_path: Path) -> None:
    broker = Broker(tmp_path, min_isr=2)
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    [answer] = produce(broker, -1, 3)
    assert answer.error == Errors.NOT_ENOUGH_REPLICAS == 19
    assert broker.rm.partitions[TP].log_end_offset == 0
    [ok] = produce(broker, 1, 3)  # acks=1 does not need the ISR
    assert ok.error == Errors.NONE


def test_produce_to_a_partition_not_led_here(broker: Broker) -> None:
    broker.leader_and_isr(FOLLOWER, 1, [1, 0], [0, 1])
    assert produce(broker, 1, 1)[0].error == Errors.NOT_LEADER_OR_FOLLOWER
    assert produce(broker, 1, 1, tp=("unknown", 0))[0].error == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_produce_acks_all_completes_when_the_follower_fetch_moves_the_high_watermark(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    answers = produce(broker, -1, 3)
    assert answers == []
    fetch(broker, FOLLOWER, 0)  # the follower has nothing yet: the HW stays at 0
    assert answers == []
    fetch(broker, FOLLOWER, 3)
    [answer] = answers
    assert (answer.error, answer.base_offset) == (Errors.NONE, 0)
    assert broker.rm.partitions[TP].high_watermark == 3


# -------------------------------------------------------------------------------------------- fetch


def test_consumer_fetch_stops_at_the_high_watermark_and_follower_fetch_moves_it(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 1, 5)
    consumer = fetch(broker, -1, 0)
    assert (consumer.error, consumer.high_watermark, consumer.records) == (Errors.NONE, 0, b"")
    follower = fetch(broker, FOLLOWER, 0)
    assert record_count(follower.records) == 5  # followers read up to the LEO
    assert follower.high_watermark == 0
    assert fetch(broker, FOLLOWER, 5).high_watermark == 5
    consumer = fetch(broker, -1, 0)
    assert (consumer.high_watermark, record_count(consumer.records)) == (5, 5)


def test_fetch_errors(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 2, [0, 1], [0, 1])
    produce(broker, 1, 2)
    assert fetch(broker, -1, 3).error == Errors.OFFSET_OUT_OF_RANGE
    assert fetch(broker, FOLLOWER, 0, current_leader_epoch=1).error == Errors.FENCED_LEADER_EPOCH
    assert fetch(broker, FOLLOWER, 0, current_leader_epoch=3).error == Errors.UNKNOWN_LEADER_EPOCH
    assert fetch(broker, 7, 0).error == Errors.NOT_LEADER_OR_FOLLOWER  # broker 7 is not a replica
    assert fetch(broker, -1, 0, tp=("unknown", 0)).error == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_follower_catching_up_joins_the_isr(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    produce(broker, 1, 3)
    fetch(broker, FOLLOWER, 3)
    assert broker.rm.partitions[TP].isr == [0, 1]
    assert broker.metadata_cache.partitions[TP].isr == [0, 1]
    change = only(broker.journal_events("isr_changed"))
    assert (change["old_isr"], change["isr"], change["reason"]) == ([0], [0, 1], "follower_caught_up")


def test_isr_expiration_drops_a_lagging_follower_and_moves_the_high_watermark(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 1, 4)
    broker.rm.maybe_shrink_isr()
    assert broker.rm.partitions[TP].isr == [0, 1]  # not lagging for long enough yet
    broker.clock.sleep(LAG_MS + 1)
    broker.rm.maybe_shrink_isr()
    partition = broker.rm.partitions[TP]
    assert partition.isr == [0] and partition.high_watermark == 4
    change = only(broker.journal_events("isr_changed"))
    assert (change["isr"], change["reason"], change["high_watermark"]) == ([0], "follower_lagging", 4)


# --------------------------------------------------------------------- LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH


def test_fetch_offset_for_timestamp(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 1, 5)
    fetch(broker, FOLLOWER, 2)  # HW 2, LEO 5

    def lookup(timestamp: int, *, client: bool, only_leader: bool = True) -> tuple[int, int]:
        found = broker.rm.fetch_offset_for_timestamp(
            TP, timestamp, -1, client_request=client, fetch_only_from_leader=only_leader
        )
        return found.offset, found.leader_epoch

    assert lookup(LATEST_TIMESTAMP, client=True) == (2, 1)  # a consumer reads up to the HW
    assert lookup(LATEST_TIMESTAMP, client=False) == (5, 1)  # a replica up to the LEO
    assert lookup(EARLIEST_TIMESTAMP, client=True) == (0, 1)
    # By timestamp: the first record at or after it (the time index), with its batch's leader epoch.
    assert lookup(1_000, client=True) == (0, 1)
    assert lookup(2**62, client=True) == (-1, -1)  # none: offset and epoch -1, as Kafka answers
    with pytest.raises(KafkaError) as unsupported:
        lookup(-5, client=True)
    assert unsupported.value.error == Errors.UNSUPPORTED_VERSION

    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    with pytest.raises(KafkaError) as not_leader:
        lookup(LATEST_TIMESTAMP, client=True)
    assert not_leader.value.error == Errors.NOT_LEADER_OR_FOLLOWER
    # The debug replica id asks any replica: a follower answers its LEO and its latest cached epoch.
    assert lookup(LATEST_TIMESTAMP, client=False, only_leader=False) == (5, 1)


def test_last_offset_for_leader_epoch(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    produce(broker, 1, 3)
    broker.leader_and_isr(LOCAL, 2, [0], [0, 1])
    produce(broker, 1, 2)
    rm = broker.rm
    assert rm.last_offset_for_leader_epoch(TP, -1, 1) == (Errors.NONE, 1, 3)
    assert rm.last_offset_for_leader_epoch(TP, -1, 2) == (Errors.NONE, 2, 5)
    assert rm.last_offset_for_leader_epoch(TP, 1, 2) == (Errors.FENCED_LEADER_EPOCH, -1, -1)
    assert rm.last_offset_for_leader_epoch(("unknown", 0), -1, 1) == (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        -1,
        -1,
    )
    # Only the leader answers (Kafka's fetchOnlyFromLeader = true), whatever the request's replica id.
    broker.leader_and_isr(1, 3, [1, 0], [0, 1])
    assert rm.last_offset_for_leader_epoch(TP, -1, 2) == (Errors.NOT_LEADER_OR_FOLLOWER, -1, -1)


# ------------------------------------------------------------------------------- DESCRIBE_REPLICA_STATE


def test_describe_replica_state(broker: Broker) -> None:
    leader_tp: TopicPartition = ("a", 0)
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1], tp=leader_tp)
    produce(broker, 1, 3, tp=leader_tp)
    broker.clock.sleep(5)
    fetch(broker, FOLLOWER, 3, tp=leader_tp)
    broker.leader_and_isr(FOLLOWER, 4, [1, 0], [0, 1])
    broker.fetchers.states[TP] = FetchStateView("fetching", 0, 7, FOLLOWER, 4)

    leader, follower = broker.rm.describe_replica_state(None)
    assert (leader.topic, leader.role, leader.leader_id, leader.high_watermark, leader.isr) == (
        "a",
        "leader",
        0,
        3,
        [0, 1],
    )
    [f] = leader.followers
    assert (f.broker_id, f.log_end_offset, f.last_caught_up_ms) == (FOLLOWER, 3, broker.clock())
    assert (follower.topic, follower.role, follower.leader_id, follower.leader_epoch) == (
        "t",
        "follower",
        1,
        4,
    )
    assert follower.fetch_state is not None
    assert (follower.fetch_state.state, follower.fetch_state.lag) == ("fetching", 7)
    assert [p.topic for p in broker.rm.describe_replica_state({"t"})] == ["t"]


# ------------------------------------------------------------------------------- the fetchers' side


def test_follower_partition_is_offered_only_for_followers(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    assert broker.rm.follower_partition(TP) is None
    assert broker.rm.follower_partition(("unknown", 0)) is None
    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    assert broker.rm.follower_partition(TP) is not None


def test_follower_truncation_is_journaled(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    produce(broker, 1, 3)
    produce(broker, 1, 2)  # offsets 3-4, truncated below
    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    view = broker.rm.follower_partition(TP)
    assert view is not None
    view.truncate_to(3, "diverged at epoch 1")
    truncated = only(broker.journal_events("truncated"))
    assert {k: truncated[k] for k in truncated if k not in ("ts_ms", "broker_id", "topic", "partition")} == {
        "event": "truncated",
        "truncate_to": 3,
        "reason": "diverged at epoch 1",
        "leader_id": FOLLOWER,
        "leader_epoch": 2,
        "log_end_offset_before": 5,
        "log_end_offset": 3,
        "high_watermark_before": 5,
        "high_watermark": 3,
        "latest_epoch": 1,
    }


def test_follower_append_and_high_watermark_reach_the_offsets_journal(broker: Broker) -> None:
    broker.leader_and_isr(FOLLOWER, 1, [1, 0], [0, 1])
    broker.rm.state_listener.flush_offsets()
    view = broker.rm.follower_partition(TP)
    assert view is not None
    leader_log_records = batch(4)  # base offset 0, as the leader would send it
    info = view.append_as_follower(leader_log_records)
    assert info is not None and (info.first_offset, info.last_offset) == (0, 3)
    assert view.update_high_watermark(10) == 4  # clamped to the follower's LEO
    broker.rm.state_listener.flush_offsets()
    offsets = broker.journal_events("offsets")[-1]
    assert (offsets["log_end_offset"], offsets["high_watermark"], offsets["log_start_offset"]) == (4, 4, 0)


def test_partition_marked_failed_journals_one_fetch_error_with_its_cause(broker: Broker) -> None:
    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    broker.rm.on_partition_failed(TP, Errors.UNKNOWN_LEADER_EPOCH, "leader has epoch 1, we have 2")
    error = only(broker.journal_events("fetch_error"))
    assert error["error_code"] == 75 and error["error"] == "UNKNOWN_LEADER_EPOCH"
    assert error["reason"] == "partition marked failed: leader has epoch 1, we have 2"
    assert (error["leader_id"], error["leader_epoch"]) == (FOLLOWER, 2)


def test_fetch_error_of_a_partition_no_longer_hosted(broker: Broker) -> None:
    broker.rm.on_fetch_error(TP, Errors.NOT_LEADER_OR_FOLLOWER, "leader moved")
    error = only(broker.journal_events("fetch_error"))
    assert (error["error_code"], error["leader_id"], error["leader_epoch"]) == (6, None, None)


# ------------------------------------------------------------------------------------ offsets, restart


def test_offsets_are_journaled_on_flush_only_when_they_changed(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    produce(broker, 1, 3)
    assert broker.journal_events("offsets") == []  # rate-limited: written by the periodic flush
    assert broker.rm.state_listener.flush_offsets() == 1
    offsets = only(broker.journal_events("offsets"))
    assert (offsets["log_end_offset"], offsets["high_watermark"]) == (3, 3)
    assert broker.rm.state_listener.flush_offsets() == 0


def test_shutdown_checkpoints_the_high_watermark_that_a_restart_resumes_from(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 1, 5)
    fetch(broker, FOLLOWER, 3)
    broker.rm.shutdown()
    assert broker.journal_events("offsets")[-1]["high_watermark"] == 3

    restarted = Broker(tmp_path)
    restarted.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    partition = restarted.rm.partitions[TP]
    assert (partition.log_end_offset, partition.high_watermark) == (5, 3)


def record_checkpoint_writes(
    monkeypatch: pytest.MonkeyPatch, before_thread_write: Callable[[], None]
) -> tuple[list[dict[Path, str]], list[dict[Path, str]]]:
    """The leader-epoch checkpoints the replica manager makes durable in a worker thread, and those its
    group commits write on the event loop (both still written); ``before_thread_write`` runs before each
    thread write."""
    threaded: list[dict[Path, str]] = []
    grouped: list[dict[Path, str]] = []
    real = checkpoint.write_all_atomically

    def in_thread(files: dict[Path, str], suffix: str = ".tmp") -> None:
        before_thread_write()
        threaded.append(dict(files))
        real(files, suffix)

    def in_group(files: dict[Path, str], suffix: str = ".tmp") -> None:
        grouped.append(dict(files))
        real(files, suffix)

    monkeypatch.setattr(rm_module, "write_all_atomically", in_thread)
    monkeypatch.setattr(checkpoint, "write_all_atomically", in_group)
    return threaded, grouped


def test_new_leader_epochs_are_made_durable_off_the_event_loop_before_they_are_applied(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The request handler's path: the checkpoint a new leadership writes is made durable in a worker thread
    # first (the partition is not leading yet meanwhile), and the group commit does not write it again.
    broker.leader_and_isr(FOLLOWER, 1, [1, 0], [0, 1])

    def not_leading_yet() -> None:
        assert not broker.rm.partitions[TP].is_leader

    threaded, grouped = record_checkpoint_writes(monkeypatch, not_leading_yet)
    state = LeaderAndIsrState(LOCAL, 2, [0, 1], [0, 1])
    result = trio.run(broker.rm.become_leader_or_follower_async, 1, 1, [(TP, state)], [endpoint(FOLLOWER)])
    assert result == (Errors.NONE, {TP: Errors.NONE})
    partition = broker.rm.partitions[TP]
    assert partition.is_leader and partition.leader_epoch == 2
    path = broker.log_dir / "t-0" / "leader-epoch-checkpoint"
    assert threaded == [{path: "0\n1\n2 0\n"}]
    assert grouped == [{}]
    assert path.read_text() == "0\n1\n2 0\n"
    assert TP in broker.fetchers.removed


def test_a_follower_append_in_a_new_leader_epoch_finds_the_epoch_durable_first_written_off_the_loop(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A replica fetcher's appends: the epoch a fetched batch starts is made durable in a worker thread
    # before the batch is appended (Kafka's assign flushes first), and the group commit around the
    # appends writes nothing again; batches of an epoch already in the cache need no write at all.
    broker.leader_and_isr(FOLLOWER, 3, [1, 0], [0, 1])
    view = broker.rm.follower_partition(TP)
    assert view is not None
    leo_at_write: list[int] = []
    threaded, grouped = record_checkpoint_writes(
        monkeypatch, lambda: leo_at_write.append(view.log_end_offset)
    )

    def records(base_offset: int, epoch: int) -> bytes:
        return build_simple_batch([b"a", b"b"], base_offset=base_offset, partition_leader_epoch=epoch)

    async def append(data: bytes) -> None:
        async with broker.rm.follower_appends({TP: data}):
            view.append_as_follower(data)

    path = broker.log_dir / "t-0" / "leader-epoch-checkpoint"
    trio.run(append, records(0, 2))
    assert threaded == [{path: "0\n1\n2 0\n"}] and grouped == [{}]
    trio.run(append, records(2, 2))  # the same epoch: nothing to write
    assert len(threaded) == 1 and grouped == [{}]
    trio.run(append, records(4, 3))
    assert threaded[1] == {path: "0\n2\n2 0\n3 4\n"} and grouped == [{}, {}]
    assert path.read_text() == "0\n2\n2 0\n3 4\n"
    assert leo_at_write == [0, 4]  # each written before its batch was appended
    assert view.latest_epoch() == 3 and view.log_end_offset == 6


def test_managed_leader_neither_waits_for_nor_adds_a_follower_the_controller_lists_as_not_live(
    broker: Broker,
) -> None:
    # Managed: eligibility is the last UPDATE_METADATA's live brokers (a broker fenced or in controlled
    # shutdown is left out). Broker 1 is caught up but not live: the HW does not wait for it and the leader
    # does not propose it for the ISR.
    proposals: list[list[int]] = []

    def submit(tp: TopicPartition, epoch: int, isr: list[int], pe: int, cb: object) -> bool:
        proposals.append(isr)
        return True

    broker.rm.enable_alter_partition(submit)
    assert broker.rm.update_metadata(1, 1, [endpoint(LOCAL)], []) == Errors.NONE
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    broker.metadata_cache.update_brokers([endpoint(LOCAL)], replace=True)
    fetch(broker, FOLLOWER, 0)  # caught up (nothing written yet)
    answers = produce(broker, -1, 2)
    [answer] = answers  # the HW moved to the leader's LEO without broker 1
    assert answer.error == Errors.NONE and broker.rm.partitions[TP].high_watermark == 2
    fetch(broker, FOLLOWER, 2)
    assert proposals == []
    broker.rm.update_metadata(1, 1, [endpoint(LOCAL), endpoint(FOLLOWER)], [])
    fetch(broker, FOLLOWER, 2)
    assert proposals == [[0, 1]]
