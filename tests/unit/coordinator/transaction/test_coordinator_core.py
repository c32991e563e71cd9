"""The transaction coordinator's decisions (Kafka's TransactionCoordinatorTest and TransactionMetadataTest):
requests in, effects out, every write completed by hand."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from coordinator.transaction.coordinator_core import (
    AppendTxn,
    Effect,
    InitProducerIdResult,
    Respond,
    SendMarkers,
    TransactionCompleted,
    TransactionCoordinatorCore,
    TxnConfig,
)
from coordinator.transaction.transaction_metadata import (
    IllegalTransition,
    TransactionMetadata,
    TransactionState,
    TxnTransitMetadata,
)
from protocol.errors import Errors, KafkaError
from protocol.txn_records import decode_key, decode_value, encode_key, encode_value

S = TransactionState
TXN = "txn-1"
TP0 = ("t", 0)
TP1 = ("t", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make_core(clock: Clock, **config: Any) -> TransactionCoordinatorCore:
    ids = itertools.count(1000)
    core = TransactionCoordinatorCore(TxnConfig(num_partitions=1, **config), clock, lambda: next(ids))
    core.on_election(0, 5)
    assert core.on_loaded(0, 5, {}) == []
    return core


def one(effects: list[Effect], kind: type) -> Any:
    found = [e for e in effects if isinstance(e, kind)]
    assert len(found) == 1, effects
    return found[0]


def written(
    core: TransactionCoordinatorCore, effects: list[Effect], error: Errors = Errors.NONE
) -> list[Effect]:
    """Completes the one AppendTxn among ``effects`` (the record written, or failed with ``error``)."""
    append = one(effects, AppendTxn)
    # The record is Kafka's bytes and reads back the same.
    value = decode_value(encode_value(append.transit.to_log_value()))
    assert value.transaction_status == append.transit.state.id
    assert decode_key(encode_key(append.transactional_id)) == append.transactional_id
    return core.on_appended(append, error)


def init(core: TransactionCoordinatorCore, *args: Any, timeout_ms: int = 60000) -> InitProducerIdResult:
    effects = core.init_producer_id("init", TXN, timeout_ms, *args)
    if any(isinstance(e, AppendTxn) for e in effects):
        effects = written(core, effects)
    result: InitProducerIdResult = one(effects, Respond).result
    return result


def add(core: TransactionCoordinatorCore, pid: int, epoch: int, *tps: tuple[str, int]) -> Errors:
    effects = core.add_partitions("add", TXN, pid, epoch, set(tps))
    if any(isinstance(e, AppendTxn) for e in effects):
        effects = written(core, effects)
    error: Errors = one(effects, Respond).result
    return error


def end(core: TransactionCoordinatorCore, pid: int, epoch: int, commit: bool) -> tuple[Errors, list[Effect]]:
    effects = core.end_txn("end", TXN, pid, epoch, commit)
    if any(isinstance(e, AppendTxn) for e in effects):
        effects = written(core, effects)
    return one(effects, Respond).result, effects


def test_new_transactional_id_gets_an_id_with_epoch_0_and_a_retry_bumps_it(clock: Clock) -> None:
    core = make_core(clock)
    assert init(core) == InitProducerIdResult(Errors.NONE, 1000, 0)
    assert init(core) == InitProducerIdResult(Errors.NONE, 1000, 1)
    assert core.txns[TXN].state == S.EMPTY


def test_timeout_above_the_maximum_is_refused(clock: Clock) -> None:
    core = make_core(clock, max_timeout_ms=900_000)
    assert init(core, timeout_ms=900_001).error == Errors.INVALID_TRANSACTION_TIMEOUT
    assert init(core, timeout_ms=0).error == Errors.INVALID_TRANSACTION_TIMEOUT
    assert TXN not in core.txns


def test_not_coordinator_and_loading(clock: Clock) -> None:
    core = TransactionCoordinatorCore(TxnConfig(num_partitions=1), clock, lambda: 1)
    assert init(core).error == Errors.NOT_COORDINATOR
    core.on_election(0, 1)
    assert init(core).error == Errors.COORDINATOR_LOAD_IN_PROGRESS
    core.on_loaded(0, 1, {})
    assert init(core).error == Errors.NONE


def test_commit_writes_prepare_answers_then_markers_then_complete(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    assert add(core, r.producer_id, 0, TP0) == Errors.NONE
    assert add(core, r.producer_id, 0, TP1) == Errors.NONE
    assert core.txns[TXN].state == S.ONGOING
    assert core.txns[TXN].partitions == {TP0, TP1}
    assert core.txns[TXN].txn_start_timestamp == clock.now
    error, effects = end(core, r.producer_id, 0, True)
    assert error == Errors.NONE
    markers = one(effects, SendMarkers)
    assert markers == SendMarkers(TXN, 5, 1000, 0, True, frozenset({TP0, TP1}))
    assert core.txns[TXN].state == S.PREPARE_COMMIT
    # While the markers go out, the producer is told to wait.
    assert add(core, 1000, 0, TP0) == Errors.CONCURRENT_TRANSACTIONS
    assert end(core, 1000, 0, True)[0] == Errors.CONCURRENT_TRANSACTIONS
    assert end(core, 1000, 0, False)[0] == Errors.INVALID_TXN_STATE
    assert init(core).error == Errors.CONCURRENT_TRANSACTIONS
    done = written(core, core.on_markers_written(markers))
    completed = one(done, TransactionCompleted)
    assert (completed.state, completed.partitions) == (S.COMPLETE_COMMIT, frozenset({TP0, TP1}))
    assert core.txns[TXN].state == S.COMPLETE_COMMIT
    assert core.txns[TXN].partitions == set()
    # A retried EndTxn(commit) is answered NONE; abort now is a wrong state.
    assert end(core, 1000, 0, True)[0] == Errors.NONE
    assert end(core, 1000, 0, False)[0] == Errors.INVALID_TXN_STATE


def test_end_txn_without_a_transaction_is_invalid_state(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    assert end(core, r.producer_id, r.producer_epoch, True)[0] == Errors.INVALID_TXN_STATE


def test_wrong_producer_id_and_old_epoch(clock: Clock) -> None:
    core = make_core(clock)
    init(core)
    r = init(core)
    assert r.producer_epoch == 1
    assert add(core, 999, 1, TP0) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert add(core, r.producer_id, 0, TP0) == Errors.PRODUCER_FENCED
    assert end(core, r.producer_id, 0, True)[0] == Errors.PRODUCER_FENCED
    effects = core.add_partitions("add", "unknown", r.producer_id, 1, {TP0})
    assert one(effects, Respond).result == Errors.INVALID_PRODUCER_ID_MAPPING


def test_init_producer_id_aborts_the_ongoing_transaction_and_fences_the_old_epoch(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    add(core, r.producer_id, 0, TP0)
    effects = core.init_producer_id("zombie-killer", TXN, 60000)
    prepare = one(effects, AppendTxn)
    assert prepare.transit.state == S.PREPARE_ABORT
    assert prepare.transit.producer_epoch == 1  # the fence
    effects = core.on_appended(prepare, Errors.NONE)
    assert one(effects, Respond).result == InitProducerIdResult(Errors.CONCURRENT_TRANSACTIONS)
    markers = one(effects, SendMarkers)
    assert (markers.commit, markers.producer_epoch, markers.partitions) == (False, 1, frozenset({TP0}))
    # The old producer is fenced at once.
    assert add(core, r.producer_id, 0, TP1) == Errors.PRODUCER_FENCED
    assert end(core, r.producer_id, 0, True)[0] == Errors.PRODUCER_FENCED
    assert init(core).error == Errors.CONCURRENT_TRANSACTIONS
    written(core, core.on_markers_written(markers))
    assert core.txns[TXN].state == S.COMPLETE_ABORT
    assert init(core) == InitProducerIdResult(Errors.NONE, r.producer_id, 2)


def test_init_with_an_unknown_expected_epoch_is_fenced_and_a_retry_is_idempotent(clock: Clock) -> None:
    core = make_core(clock)
    init(core)  # epoch 0
    assert init(core, 1000, 0) == InitProducerIdResult(Errors.NONE, 1000, 1)
    # The answer was lost: the producer retries with epoch 0 again and gets the same epoch.
    assert init(core, 1000, 0) == InitProducerIdResult(Errors.NONE, 1000, 1)
    assert init(core, 1000, 7).error == Errors.PRODUCER_FENCED
    assert init(core, 4242, 1).error == Errors.PRODUCER_FENCED


def test_exhausted_epoch_rotates_the_producer_id(clock: Clock) -> None:
    core = make_core(clock)
    init(core)
    core.txns[TXN].producer_epoch = 32766
    r = init(core)
    assert (r.producer_id, r.producer_epoch) == (1001, 0)
    assert core.txns[TXN].previous_producer_id == 1000


def test_a_failed_write_undoes_the_transition(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    effects = core.add_partitions("add", TXN, r.producer_id, 0, {TP0})
    effects = written(core, effects, Errors.NOT_ENOUGH_REPLICAS)
    assert one(effects, Respond).result == Errors.COORDINATOR_NOT_AVAILABLE
    assert core.txns[TXN].state == S.EMPTY and core.txns[TXN].pending_state is None
    effects = core.add_partitions("add", TXN, r.producer_id, 0, {TP0})
    assert (
        one(written(core, effects, Errors.NOT_LEADER_OR_FOLLOWER), Respond).result == Errors.NOT_COORDINATOR
    )


def test_a_resigned_coordinator_answers_not_coordinator_when_its_write_returns(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    effects = core.add_partitions("add", TXN, r.producer_id, 0, {TP0})
    core.on_resignation(0)
    assert one(written(core, effects), Respond).result == Errors.NOT_COORDINATOR
    assert core.describe(TXN).error == Errors.NOT_COORDINATOR


def test_a_complete_write_that_fails_is_retried(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    add(core, r.producer_id, 0, TP0)
    _, effects = end(core, r.producer_id, 0, False)
    complete = core.on_markers_written(one(effects, SendMarkers))
    retry = one(core.on_appended(one(complete, AppendTxn), Errors.REQUEST_TIMED_OUT), AppendTxn)
    assert retry.delay_ms > 0 and retry.transit.state == S.COMPLETE_ABORT
    written(core, [retry])
    assert core.txns[TXN].state == S.COMPLETE_ABORT


def test_timed_out_transaction_is_aborted_with_a_bumped_epoch(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core, timeout_ms=1000)
    add(core, r.producer_id, 0, TP0)
    clock.now += 1000
    assert core.abort_timed_out_transactions() == []
    clock.now += 1
    prepare = one(core.abort_timed_out_transactions(), AppendTxn)
    assert (prepare.transit.state, prepare.transit.producer_epoch) == (S.PREPARE_ABORT, 1)
    markers = one(core.on_appended(prepare, Errors.NONE), SendMarkers)
    assert markers.commit is False
    assert add(core, r.producer_id, 0, TP1) == Errors.PRODUCER_FENCED
    written(core, core.on_markers_written(markers))
    assert core.txns[TXN].state == S.COMPLETE_ABORT


def test_a_new_coordinator_finishes_a_prepared_commit(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    add(core, r.producer_id, 0, TP0)
    _, effects = end(core, r.producer_id, 0, True)
    snapshot = {TXN: one(effects, SendMarkers)}
    value = core.txns[TXN]
    loaded = {
        TXN: decode_value(
            encode_value(
                TxnTransitMetadata(
                    value.producer_id,
                    -1,
                    value.producer_epoch,
                    -1,
                    value.txn_timeout_ms,
                    value.state,
                    frozenset(value.partitions),
                    value.txn_start_timestamp,
                    clock.now,
                ).to_log_value()
            )
        )
    }
    other = TransactionCoordinatorCore(TxnConfig(num_partitions=1), clock, lambda: 1)
    other.on_election(0, 6)
    markers = one(other.on_loaded(0, 6, loaded), SendMarkers)
    assert markers == SendMarkers(TXN, 6, 1000, 0, True, frozenset({TP0}))
    assert snapshot[TXN].partitions == markers.partitions
    written(other, other.on_markers_written(markers))
    assert other.txns[TXN].state == S.COMPLETE_COMMIT
    # Markers of the old coordinator epoch complete nothing.
    assert other.on_markers_written(snapshot[TXN]) == []


def test_verify_only(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    add(core, r.producer_id, 0, TP0)
    assert core.verify_partitions(TXN, r.producer_id, 0, [TP0, TP1]) == {
        TP0: Errors.NONE,
        TP1: Errors.INVALID_TXN_STATE,
    }
    assert core.verify_partitions(TXN, r.producer_id, 1, [TP0]) == {TP0: Errors.PRODUCER_FENCED}


def test_describe_and_list(clock: Clock) -> None:
    core = make_core(clock)
    r = init(core)
    add(core, r.producer_id, 0, TP0)
    d = core.describe(TXN)
    assert (d.error, d.state, d.producer_id, d.partitions) == (Errors.NONE, "Ongoing", 1000, [TP0])
    assert core.describe("nope").error == Errors.TRANSACTIONAL_ID_NOT_FOUND
    assert core.list_transactions() == (Errors.NONE, [], [(TXN, 1000, "Ongoing")])
    assert core.list_transactions(["Empty", "Bogus"]) == (Errors.NONE, ["Bogus"], [])
    clock.now += 500
    assert core.list_transactions(duration_ms=499)[2] == [(TXN, 1000, "Ongoing")]
    assert core.list_transactions(duration_ms=500)[2] == []


def test_producer_ids_unavailable(clock: Clock) -> None:
    def no_ids() -> int:
        raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS, "no block yet")

    core = TransactionCoordinatorCore(TxnConfig(num_partitions=1), clock, no_ids)
    core.on_election(0, 0)
    core.on_loaded(0, 0, {})
    assert init(core).error == Errors.COORDINATOR_LOAD_IN_PROGRESS


def test_metadata_refuses_transitions_kafka_does_not_allow() -> None:
    meta = TransactionMetadata(TXN, 1, producer_epoch=0)
    with pytest.raises(IllegalTransition):
        meta.prepare_abort_or_commit(S.PREPARE_COMMIT, 0)  # Empty -> PrepareCommit
    transit = meta.prepare_add_partitions({TP0}, 0)
    with pytest.raises(IllegalTransition):
        meta.prepare_add_partitions({TP1}, 0)  # one pending at a time
    meta.complete_transition_to(transit)
    assert meta.state == S.ONGOING
