"""What a broker's ``/metrics`` reads from its state when scraped: logs, fetch sessions, purgatories."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest

from broker.delayed_ops import ProducePartitionStatus
from protocol import messages as m
from protocol.api_keys import ApiKeys
from tests.unit.broker.broker_support import LOCAL, TP, batch, fetch_request, make_request, response

from .support import MeteredBroker

FOLLOWER = 1


@pytest.fixture
def broker(tmp_path: Path) -> MeteredBroker:
    return MeteredBroker(tmp_path)


def test_log_size_and_offsets_per_partition(broker: MeteredBroker) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL])
    broker.rm.append_records(30_000, 1, {TP: batch(5)}, lambda _: None)
    labels = {"topic": "t", "partition": "0"}
    assert broker.value("kafka_log_log_logendoffset", **labels) == 5
    assert broker.value("kafka_log_log_logstartoffset", **labels) == 0
    assert broker.value("kafka_log_log_size", **labels) == broker.log_manager.logs[TP].size_in_bytes > 0
    assert broker.value("kafka_log_log_numlogsegments", **labels) == 1


async def test_fetch_session_cache_counts_sessions_and_their_partitions(broker: MeteredBroker) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    assert broker.value("kafka_server_fetchsessioncache_numincrementalfetchsessions") == 0
    request = make_request(ApiKeys.FETCH, fetch_request(FOLLOWER, 0, session_epoch=0))
    await broker.apis.handle(request)
    assert response(request, m.FetchResponse).session_id != 0
    assert broker.value("kafka_server_fetchsessioncache_numincrementalfetchsessions") == 1
    assert broker.value("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == 1
    assert broker.value("kafka_server_fetchsessioncache_incrementalfetchsessionevictionspersec_total") == 0


def test_a_waiting_acks_all_produce_is_in_the_produce_purgatory(broker: MeteredBroker) -> None:
    broker.leader_and_isr(LOCAL, 1, [LOCAL, FOLLOWER], [LOCAL, FOLLOWER])
    answers: list[dict[tuple[str, int], ProducePartitionStatus]] = []
    broker.rm.append_records(30_000, -1, {TP: batch(1)}, answers.append)
    assert not answers
    produce = {"delayedoperation": "Produce"}
    assert broker.value("kafka_server_delayedoperationpurgatory_numdelayedoperations", **produce) == 1
    assert broker.value("kafka_server_delayedoperationpurgatory_purgatorysize", **produce) == 1
    assert broker.value("kafka_server_delayedoperationpurgatory_purgatorysize", delayedoperation="Fetch") == 0


def test_without_fetchers_the_max_lag_is_zero_and_the_text_renders(broker: MeteredBroker) -> None:
    assert broker.value("kafka_server_replicafetchermanager_maxlag", clientid="Replica") == 0
    text = generate_latest(broker.metrics.registry).decode()
    assert "# TYPE kafka_server_replicamanager_underreplicatedpartitions gauge" in text
    assert "_created" not in text
