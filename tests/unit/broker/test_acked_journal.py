"""``acked.jsonl``: a leader journals every batch it acknowledges to a client (acks 1 or all, not 0) before
the response goes out (docs/storage.md, "acked.jsonl")."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.delayed_ops import FetchParams, FetchPartitionStatus, ProducePartitionStatus
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.records import build_simple_batch, iter_batches
from server.journal import AckJournal, read_journal

from .broker_support import LOCAL, TP, Broker, batch

FOLLOWER = 1
FIELDS = [
    "ts_ms",
    "broker_id",
    "topic",
    "partition",
    "base_offset",
    "last_offset",
    "crc",
    "acks",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "client_id",
    "received_ms",
]


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(tmp_path, min_isr=1)
    b.rm.acked_journal = AckJournal(tmp_path / "acked.jsonl", LOCAL, clock_ms=b.clock)
    return b


def lines(b: Broker) -> list[dict[str, object]]:
    assert b.rm.acked_journal is not None
    return read_journal(b.rm.acked_journal.path)


def produce(
    b: Broker, acks: int, records: bytes, tp: TopicPartition = TP, client_id: str = "c1"
) -> list[tuple[ProducePartitionStatus, int]]:
    """What the client was answered, each with the number of journal lines written when it was."""
    answers: list[tuple[ProducePartitionStatus, int]] = []
    b.rm.append_records(
        30_000, acks, {tp: records}, lambda st: answers.append((st[tp], len(lines(b)))), client_id=client_id
    )
    return answers


def follower_fetch(b: Broker, offset: int) -> None:
    params = FetchParams(FOLLOWER, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20)
    params.partitions[TP] = FetchPartitionStatus(offset, -1, 1 << 20)
    b.rm.fetch_messages(params, lambda _: None)


def test_acks_1_journals_each_batch_before_the_answer(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 1, batch(3))
    two = batch(2) + build_simple_batch(
        [b"x"], base_timestamp=1_000, producer_id=7, producer_epoch=2, base_sequence=5
    )
    [(answer, written)] = produce(broker, 1, two, client_id="rdkafka")
    assert answer.error == Errors.NONE and written == 3  # on disk before the response
    got = lines(broker)
    assert [list(line) for line in got] == [FIELDS] * 3
    crcs = [h.crc for _, h in iter_batches(two)]
    assert [(x["base_offset"], x["last_offset"], x["crc"], x["acks"], x["client_id"]) for x in got[1:]] == [
        (3, 4, crcs[0], 1, "rdkafka"),
        (5, 5, crcs[1], 1, "rdkafka"),
    ]
    assert (got[2]["producer_id"], got[2]["producer_epoch"], got[2]["base_sequence"]) == (7, 2, 5)
    assert (got[1]["producer_id"], got[1]["broker_id"], got[1]["topic"], got[1]["partition"]) == (
        -1,
        0,
        "t",
        0,
    )
    assert got[0]["ts_ms"] == broker.clock()


def test_acks_all_is_journaled_when_the_high_watermark_reaches_it_not_before(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    assert produce(broker, -1, batch(3)) == []
    follower_fetch(broker, 0)
    assert lines(broker) == []  # appended, not acknowledged
    follower_fetch(broker, 3)
    [line] = lines(broker)
    assert (line["base_offset"], line["last_offset"], line["acks"]) == (0, 2, -1)


def test_acks_0_and_failed_or_timed_out_batches_are_not_journaled(broker: Broker) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    produce(broker, 0, batch(2))
    assert produce(broker, 1, batch(1), tp=("unknown", 0))[0][0].error == Errors.UNKNOWN_TOPIC_OR_PARTITION
    answers = produce(broker, -1, batch(1))
    broker.clock.sleep(30_001)
    broker.produce_purgatory._expire_due()
    [(answer, _)] = answers
    assert answer.error == Errors.REQUEST_TIMED_OUT
    assert lines(broker) == []


def test_a_retried_idempotent_batch_answered_as_a_duplicate_names_the_original_offsets(
    broker: Broker,
) -> None:
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    first = build_simple_batch(
        [b"a", b"b"], base_timestamp=1_000, producer_id=9, producer_epoch=0, base_sequence=0
    )
    produce(broker, 1, first)
    produce(broker, 1, batch(3))  # someone else's batch between the attempt and its retry
    [(answer, _)] = produce(broker, 1, first)  # the retry: not written again
    assert (answer.error, answer.base_offset) == (Errors.NONE, 0)
    original, _, retry = lines(broker)
    assert (retry["base_offset"], retry["last_offset"], retry["crc"]) == (0, 1, original["crc"])
    assert (retry["producer_id"], retry["producer_epoch"], retry["base_sequence"]) == (9, 0, 0)
    assert broker.rm.partitions[TP].log_end_offset == 5
