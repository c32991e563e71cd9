"""A follower's incremental fetch session on the leader: partitions with nothing to read or report (quiet) are
neither read nor answered (KIP-227), yet the follower stays in sync, a parked fetch wakes when one of them
gets data, and a changed high watermark or epoch is still reported. Through ``KafkaApis.handle`` over real
logs on a ``MockTime`` clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.errors import Errors
from server.request_channel import Request

from .broker_support import LAG_MS, Broker, batch, make_request, produce_request, record_count, response

FOLLOWER = 1
TPS: list[TopicPartition] = [("t", 0), ("t", 1), ("t", 2)]


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    b = Broker(tmp_path)
    for tp in TPS:
        errors = b.leader_and_isr(0, 1, [0, FOLLOWER], [0, FOLLOWER], tp=tp)
        assert errors == (Errors.NONE, {tp: Errors.NONE})
    return b


def fetch(
    session_id: int,
    session_epoch: int,
    offsets: dict[TopicPartition, int],
    *,
    max_wait_ms: int = 0,
    current_leader_epoch: int = 1,
) -> m.FetchRequest:
    return m.FetchRequest(
        replica_id=FOLLOWER,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            m.FetchRequestTopic(
                topic="t",
                partitions=[
                    m.FetchRequestPartition(
                        partition=tp[1],
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=offset,
                        partition_max_bytes=1 << 20,
                    )
                    for tp, offset in offsets.items()
                ],
            )
        ]
        if offsets
        else [],
    )


async def send(b: Broker, message: m.FetchRequest) -> Request:
    request = make_request(ApiKeys.FETCH, message)
    await b.apis.handle(request)
    return request


def partitions(request: Request) -> dict[TopicPartition, m.FetchResponsePartition]:
    body = response(request, m.FetchResponse)
    assert body.error_code == 0
    return {(t.topic, p.partition_index): p for t in body.responses for p in t.partitions}


async def open_session(b: Broker) -> int:
    """A full FETCH at offset 0 of every partition, then an incremental one that takes the HW: from then
    on every partition is quiet."""
    first = response(await send(b, fetch(0, 0, dict.fromkeys(TPS, 0))), m.FetchResponse)
    assert first.session_id != 0 and len(partitions_of(first)) == len(TPS)
    return first.session_id


def partitions_of(body: m.FetchResponse) -> dict[TopicPartition, m.FetchResponsePartition]:
    return {(t.topic, p.partition_index): p for t in body.responses for p in t.partitions}


async def test_idle_rounds_answer_nothing_and_keep_the_follower_in_the_isr(broker: Broker) -> None:
    session = await open_session(broker)
    for epoch in range(1, 6):
        broker.clock.sleep(LAG_MS // 2 + 1)
        assert partitions(await send(broker, fetch(session, epoch, {}))) == {}
        broker.rm.maybe_shrink_isr()
    # 2.5 x replica.lag.time.max.ms of idle rounds, then new data: the follower is behind the leader's LEO
    # for the first time, and is judged by when it was last caught up, which the idle rounds kept recent.
    assert await broker_produce(broker, TPS[0], 2)
    broker.rm.maybe_shrink_isr()
    assert broker.rm.partitions[TPS[0]].isr == [0, FOLLOWER]
    # Without fetches it does fall out: the rounds above are what kept it in.
    broker.clock.sleep(LAG_MS + 1)
    broker.rm.maybe_shrink_isr()
    assert broker.rm.partitions[TPS[0]].isr == [0]


async def test_a_parked_fetch_wakes_when_a_quiet_partition_gets_data(broker: Broker) -> None:
    session = await open_session(broker)
    parked = await send(broker, fetch(session, 1, {}, max_wait_ms=500))
    assert not parked.done
    # Parked, but not watched partition by partition: the session is what finds it.
    assert (broker.fetch_purgatory.delayed, broker.fetch_purgatory.watched) == (1, 0)
    produced = await broker_produce(broker, TPS[1], 3)
    assert produced
    got = partitions(parked)
    assert list(got) == [TPS[1]] and record_count(got[TPS[1]].records) == 3
    # The follower fetches past the batch: the HW moves, and the next round reports it.
    moved = partitions(await send(broker, fetch(session, 2, {TPS[1]: 3})))
    assert moved[TPS[1]].high_watermark == 3 and moved[TPS[1]].records == b""
    assert partitions(await send(broker, fetch(session, 3, {}))) == {}


async def broker_produce(b: Broker, tp: TopicPartition, count: int) -> bool:
    request = make_request(ApiKeys.PRODUCE, produce_request(1, batch(count), tp=tp))
    await b.apis.handle(request)
    return request.done


async def test_a_parked_fetch_expires_empty_and_a_new_leader_epoch_is_reported(broker: Broker) -> None:
    session = await open_session(broker)
    parked = await send(broker, fetch(session, 1, {}, max_wait_ms=500))
    assert not parked.done
    broker.clock.sleep(501)
    broker.fetch_purgatory._expire_due()
    assert partitions(parked) == {}
    # A new leader epoch: the session's partitions still name epoch 1, so the next round answers the fence.
    assert broker.leader_and_isr(0, 2, [0, FOLLOWER], [0, FOLLOWER], tp=TPS[2])[0] == Errors.NONE
    fenced = partitions(await send(broker, fetch(session, 2, {})))
    assert {tp: p.error_code for tp, p in fenced.items()} == {TPS[2]: Errors.FENCED_LEADER_EPOCH}


async def test_a_hw_left_behind_by_a_shrunk_isr_moves_on_the_next_round(tmp_path: Path) -> None:
    # Replica 2 is in the ISR but never fetches, so the follower's fetch at the LEO cannot move the HW.
    # The controller then drops 2 from the ISR (a new leader epoch, as a controlled shutdown does). The
    # follower is at the LEO with nothing new to fetch: the HW must still reach the LEO, or an acks=all
    # write waits for its timeout (and a retry writes it twice).
    b = Broker(tmp_path)
    tp = TPS[0]
    assert b.leader_and_isr(0, 1, [0, FOLLOWER, 2], [0, FOLLOWER, 2], tp=tp)[0] == Errors.NONE
    first = response(await send(b, fetch(0, 0, {tp: 0})), m.FetchResponse)
    session = first.session_id
    write = make_request(ApiKeys.PRODUCE, produce_request(-1, batch(3), tp=tp))
    await b.apis.handle(write)
    assert not write.done
    got = partitions(await send(b, fetch(session, 1, {tp: 0})))
    assert record_count(got[tp].records) == 3
    partitions(await send(b, fetch(session, 2, {tp: 3})))
    assert b.rm.partitions[tp].high_watermark == 0 and not write.done
    # The follower hears of epoch 2 first (the controller's requests race): its fetch in epoch 2 is
    # answered UNKNOWN_LEADER_EPOCH, and the session keeps epoch 2 for the rounds that follow.
    early = partitions(await send(b, fetch(session, 3, {tp: 3}, current_leader_epoch=2)))
    assert early[tp].error_code == Errors.UNKNOWN_LEADER_EPOCH
    assert b.leader_and_isr(0, 2, [0, FOLLOWER], [0, FOLLOWER, 2], tp=tp)[0] == Errors.NONE
    partitions(await send(b, fetch(session, 4, {})))
    assert b.rm.partitions[tp].high_watermark == 3
    assert write.done
    assert response(write, m.ProduceResponse).responses[0].partition_responses[0].error_code == 0
