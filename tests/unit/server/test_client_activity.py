"""``client-activity.jsonl`` and ``served.jsonl`` (docs/storage.md): what clients asked and were told,
gathered in memory and written by ``flush``; and the requests that feed them (``KafkaApis``, no sockets)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.records import build_simple_batch
from server.client_activity import ClientActivity, batch_span
from server.journal import AckJournal, read_journal

from ..broker.broker_support import LOCAL, TP, Broker, batch, fetch_request, make_request, produce_request


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_250

    def __call__(self) -> int:
        return self.ms


def journals(tmp_path: Path, clock: Clock) -> ClientActivity:
    return ClientActivity(tmp_path / "client-activity.jsonl", tmp_path / "served.jsonl", 3, clock_ms=clock)


def test_one_line_per_second_and_key_with_requests_records_and_errors_by_name(tmp_path: Path) -> None:
    clock = Clock()
    a = journals(tmp_path, clock)
    a.record("app", "127.0.0.1", "produce", "t", 0, records=5)
    a.record("app", "127.0.0.1", "produce", "t", 0, records=3)
    a.record("app", "127.0.0.1", "produce", "t", 0, error=int(Errors.NOT_LEADER_OR_FOLLOWER))
    a.record("app", "127.0.0.1", "produce", "t", 1, records=1)
    a.record("other", "127.0.0.2", "fetch", "t", 0, records=8)
    clock.ms += 1000  # the next second: a line of its own
    a.record("app", "127.0.0.1", "produce", "t", 0, records=2)
    assert not (tmp_path / "client-activity.jsonl").exists() or not read_journal(
        tmp_path / "client-activity.jsonl"
    )
    assert a.flush() == 4
    got = read_journal(tmp_path / "client-activity.jsonl")
    keyed = {(x["ts_ms"], x["client_id"], x["api"], x["partition"]): x for x in got}
    first = keyed[(1_700_000_000_000, "app", "produce", 0)]
    assert (first["requests"], first["records"], first["errors"]) == (3, 8, {"NOT_LEADER_OR_FOLLOWER": 1})
    assert (first["broker_id"], first["client_host"], first["topic"]) == (3, "127.0.0.1", "t")
    assert keyed[(1_700_000_000_000, "app", "produce", 1)]["records"] == 1
    assert keyed[(1_700_000_000_000, "other", "fetch", 0)]["client_host"] == "127.0.0.2"
    assert keyed[(1_700_000_001_000, "app", "produce", 0)]["requests"] == 1
    assert a.flush() == 0  # nothing twice
    assert len(read_journal(tmp_path / "client-activity.jsonl")) == 4


def test_served_lines_are_written_by_flush(tmp_path: Path) -> None:
    a = journals(tmp_path, Clock())
    a.served("c", "h", "t", 2, 10, 19, 1)
    assert read_journal(tmp_path / "served.jsonl") == []
    a.close()
    [line] = read_journal(tmp_path / "served.jsonl")
    assert line == {
        "ts_ms": 1_700_000_000_250,
        "broker_id": 3,
        "client_id": "c",
        "client_host": "h",
        "topic": "t",
        "partition": 2,
        "fetch_offset": 10,
        "last_offset": 19,
        "isolation_level": "read_committed",
    }


def test_batch_span_reads_headers_only() -> None:
    two = build_simple_batch([b"a", b"b", b"c"], base_offset=5) + build_simple_batch([b"d"], base_offset=8)
    assert batch_span(two) == (5, 8, 4)
    assert batch_span(b"") is None
    assert batch_span(two[:-3]) == (5, 7, 3)  # a torn last batch (a fetch's size limit) is not counted


async def handle(b: Broker, api_key: ApiKeys, message: Any, client_id: str = "unit-test") -> None:
    request = make_request(api_key, message)
    request.header = dataclasses.replace(request.header, client_id=client_id)
    await b.apis.handle(request)


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(tmp_path, min_isr=1)
    b.apis.client_activity = ClientActivity(
        tmp_path / "client-activity.jsonl", tmp_path / "served.jsonl", LOCAL, clock_ms=b.clock
    )
    b.rm.acked_journal = AckJournal(tmp_path / "acked.jsonl", LOCAL, clock_ms=b.clock)
    b.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL])
    return b


async def test_a_producer_and_a_consumer_are_journaled_by_client_id(broker: Broker, tmp_path: Path) -> None:
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(4)), client_id="my-producer")
    await handle(broker, ApiKeys.FETCH, fetch_request(-1, 1), client_id="my-consumer")
    await handle(broker, ApiKeys.FETCH, fetch_request(1, 0), client_id="follower")  # not a client
    await handle(broker, ApiKeys.METADATA, m.MetadataRequest(topics=None), client_id="my-consumer")
    assert broker.apis.client_activity is not None
    broker.apis.client_activity.flush()
    activity = read_journal(tmp_path / "client-activity.jsonl")
    by = {(x["client_id"], x["api"]): x for x in activity}
    assert set(by) == {("my-producer", "produce"), ("my-consumer", "fetch"), ("my-consumer", "metadata")}
    assert (by["my-producer", "produce"]["records"], by["my-producer", "produce"]["topic"]) == (4, TP[0])
    assert by["my-consumer", "fetch"]["records"] == 3  # offsets 1..3 of the batch 0..3
    assert by["my-consumer", "metadata"]["topic"] is None
    [served] = read_journal(tmp_path / "served.jsonl")
    assert (served["client_id"], served["fetch_offset"], served["last_offset"]) == ("my-consumer", 1, 3)
    assert served["isolation_level"] == "read_uncommitted"
    [acked] = read_journal(tmp_path / "acked.jsonl")
    assert acked["client_id"] == "my-producer" and acked["received_ms"] <= acked["ts_ms"]
