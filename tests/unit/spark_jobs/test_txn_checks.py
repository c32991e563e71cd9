"""The transaction checks' judging (spark_jobs/txn_checks.py) on hand-made facts: the partitions'
transactional batches and markers, the coordinator's completed transactions, read_committed responses."""

from __future__ import annotations

from typing import Any

from protocol.txn_records import TransactionLogValue
from spark_jobs.txn_checks import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    TxnBatch,
    TxnFacts,
    _completions,
    atomic_violations,
    hanging_violations,
    isolation_violations,
)

A, B = ("t", 0), ("t", 1)
PID = 4000


def data(offset: int, ts: int, pid: int = PID, n: int = 1) -> TxnBatch:
    return TxnBatch(offset, offset + n - 1, pid, 0, ts)


def marker(offset: int, ts: int, commit: bool, pid: int = PID) -> TxnBatch:
    return TxnBatch(offset, offset, pid, 0, ts, commit)


def value(status: int, ts: int, parts: dict[str, list[int]], pid: int = PID) -> TransactionLogValue:
    return TransactionLogValue(pid, 0, 60_000, status, parts, ts, 0)


def committed_txn() -> TxnFacts:
    facts = TxnFacts(replicas={A: 1, B: 1})
    facts.batches = {A: [data(0, 100, n=2), marker(2, 210, True)], B: [data(0, 110), marker(1, 220, True)]}
    facts.completions = _completions(
        [
            ("app", value(PREPARE_COMMIT, 200, {"t": [0, 1]})),
            ("app", value(COMPLETE_COMMIT, 300, {})),
        ]
    )
    return facts


def test_a_transaction_committed_in_every_partition_is_atomic() -> None:
    facts = committed_txn()
    assert atomic_violations(facts) == (2, [])


def test_a_partition_with_the_other_marker_or_none_breaks_atomicity() -> None:
    facts = committed_txn()
    facts.batches[B][-1] = marker(1, 220, False)
    checked, found = atomic_violations(facts)
    assert checked == 2 and [(v["partition"], v["problem"]) for v in found] == [
        (1, "ABORT marker at offset 1")
    ]
    facts.batches[B] = [data(0, 110)]  # the commit marker never written there
    problems = sorted(v["problem"] for v in atomic_violations(facts)[1])
    assert problems == ["completed COMMIT has no marker here", "data from offset 0 left without a marker"]


def test_a_retried_prepare_and_a_later_transaction_are_told_apart() -> None:
    values: list[tuple[str, Any]] = [
        ("app", value(PREPARE_ABORT, 200, {"t": [0]})),
        ("app", value(PREPARE_ABORT, 200, {"t": [0]})),
        ("app", value(COMPLETE_ABORT, 300, {})),
        ("app", value(PREPARE_COMMIT, 500, {"t": [0]})),
        ("app", None),
    ]
    first, second = _completions(values)
    assert (first.commit, first.complete_ms, first.until_ms) == (False, 300, 500)
    assert (second.commit, second.complete_ms) == (True, None)


def test_a_transaction_open_past_the_timeout_at_the_end_is_hanging() -> None:
    facts = TxnFacts(replicas={A: 1}, hanging_after_ms=10_000)
    facts.batches = {A: [data(0, 1_000), marker(1, 1_100, False), data(2, 2_000)]}
    facts.end_ms = 11_999
    assert hanging_violations(facts) == (1, [])
    facts.end_ms = 12_001
    _, [v] = hanging_violations(facts)
    assert (v["topic"], v["partition"], v["producer_id"], v["first_offset"]) == ("t", 0, PID, 2)


def served(first: int, last: int, ts: int, lso: int, aborted: list[list[int]] | None) -> dict[str, Any]:
    line: dict[str, Any] = {
        "topic": "t",
        "partition": 0,
        "ts_ms": ts,
        "fetch_offset": first,
        "last_offset": last,
        "isolation_level": "read_committed",
        "last_stable_offset": lso,
    }
    if aborted is not None:
        line["aborted_transactions"] = aborted
    return line


def test_read_committed_responses_are_judged_against_the_markers() -> None:
    facts = TxnFacts(replicas={A: 1})
    facts.batches = {
        A: [data(0, 100, n=2), marker(2, 200, False), data(3, 300), marker(4, 400, True), data(5, 500)]
    }
    facts.served = [served(0, 4, 450, 5, [[PID, 0]])]
    assert isolation_violations(facts)[:2] == (1, [])
    bad = [
        served(0, 2, 250, 3, []),  # the aborted batch was not listed
        served(3, 3, 350, 5, []),  # served before its commit marker was written
        served(5, 5, 600, 5, []),  # at the LSO
        served(5, 5, 600, 6, []),  # data of a transaction that never ended
    ]
    facts.served = bad
    checked, found, _ = isolation_violations(facts)
    assert checked == 4 and len(found) == 4
    assert "aborted_transactions" in found[0]["problem"] and "open" in found[1]["problem"]
    assert "LSO" in found[2]["problem"] and "open" in found[3]["problem"]
