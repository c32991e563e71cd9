"""``KafkaApis.handle`` without sockets, after Kafka's KafkaApisTest: each request is a typed message from
``protocol.messages`` encoded and decoded as the socket server does, handled by a broker core over real
logs in ``tmp_path`` on a ``MockTime`` clock, and its response frame is decoded back into the typed
response."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from protocol import messages as m
from protocol.api_keys import DEBUGGING_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKeys
from protocol.errors import Errors
from server.request_channel import Request

from .broker_support import (
    LOCAL,
    TP,
    Broker,
    batch,
    fetch_request,
    make_request,
    produce_request,
    record_count,
    response,
    response_body,
)

FOLLOWER = 1


@pytest.fixture
def broker(tmp_path: Path) -> Broker:
    return Broker(tmp_path)


async def handle(b: Broker, api_key: ApiKeys, message: Any) -> Request:
    request = make_request(api_key, message)
    await b.apis.handle(request)
    return request


def leader_and_isr_request(
    leader: int,
    leader_epoch: int,
    isr: list[int],
    replicas: list[int],
    *,
    topic: str = "t",
    controller_epoch: int = 1,
) -> m.LeaderAndIsrRequest:
    return m.LeaderAndIsrRequest(
        controller_id=9,
        controller_epoch=controller_epoch,
        topic_states=[
            m.LeaderAndIsrRequestTopicState(
                topic_name=topic,
                partition_states=[
                    m.LeaderAndIsrRequestPartitionState(
                        partition_index=0,
                        controller_epoch=controller_epoch,
                        leader=leader,
                        leader_epoch=leader_epoch,
                        isr=isr,
                        replicas=replicas,
                    )
                ],
            )
        ],
        live_leaders=[m.LeaderAndIsrRequestLiveLeader(broker_id=FOLLOWER, host_name="127.0.0.1", port=9001)],
    )


def partition_errors(resp: m.LeaderAndIsrResponse | m.StopReplicaResponse) -> dict[tuple[str, int], int]:
    return {(e.topic_name, e.partition_index): e.error_code for e in resp.partition_errors}


async def lead(b: Broker, isr: list[int], replicas: list[int], epoch: int = 1) -> None:
    resp = response(
        await handle(b, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(LOCAL, epoch, isr, replicas)),
        m.LeaderAndIsrResponse,
    )
    assert resp.error_code == 0 and partition_errors(resp) == {TP: 0}


def produced(request: Request) -> m.ProduceResponsePartition:
    [topic] = response(request, m.ProduceResponse).responses
    [partition] = topic.partition_responses
    return partition


def fetched(request: Request) -> m.FetchResponsePartition:
    [topic] = response(request, m.FetchResponse).responses
    [partition] = topic.partitions
    return partition


# ---------------------------------------------------------------------------- the request envelope


async def test_body_that_does_not_match_the_schema_is_invalid_request(broker: Broker) -> None:
    request = await handle(broker, ApiKeys.PRODUCE, {"acks": 1, "timeout_ms": 1000})  # no topic_data
    body = response_body(request)
    assert body["error_code"] == Errors.INVALID_REQUEST == 42
    assert "topic_data" in body["error_message"]


async def test_api_not_served_by_a_broker_is_unsupported_version(broker: Broker) -> None:
    body = response_body(await handle(broker, ApiKeys.BROKER_HEARTBEAT, {}))
    assert body["error_code"] == Errors.UNSUPPORTED_VERSION == 35


async def test_admin_apis_over_msgpack_go_to_the_controller(broker: Broker) -> None:
    """CREATE_TOPICS and DESCRIBE_QUORUM are served in msgpack too (forwarded to the controller); a broker
    with no controller to forward to says NOT_CONTROLLER."""
    topic = {"name": "x", "num_partitions": 1, "replication_factor": 1}
    created = response_body(
        await handle(broker, ApiKeys.CREATE_TOPICS, {"topics": [topic], "timeout_ms": 1000})
    )
    assert created["topics"][0]["error_code"] == Errors.NOT_CONTROLLER
    described = response_body(await handle(broker, ApiKeys.DESCRIBE_QUORUM, {}))
    assert described["error_code"] == Errors.NOT_CONTROLLER


# --------------------------------------------------------------------- LEADER_AND_ISR, STOP_REPLICA


async def test_leader_and_isr(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1])
    assert broker.rm.partitions[TP].is_leader
    assert broker.journal_events("became_leader")[0]["leader_epoch"] == 1

    follower = await handle(
        broker, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(FOLLOWER, 2, [1, 0], [0, 1])
    )
    assert partition_errors(response(follower, m.LeaderAndIsrResponse)) == {TP: 0}
    assert broker.fetchers.added[TP].leader.port == 9001  # the live leader the request named

    # Not newer than the current leader epoch: refused for that partition (Kafka's STALE_CONTROLLER_EPOCH).
    same_epoch = await handle(broker, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(LOCAL, 2, [0], [0, 1]))
    assert partition_errors(response(same_epoch, m.LeaderAndIsrResponse)) == {TP: 11}
    assert not broker.rm.partitions[TP].is_leader


async def test_leader_and_isr_stale_controller_epoch_and_bad_topic_names(broker: Broker) -> None:
    await handle(
        broker, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(LOCAL, 1, [0], [0], controller_epoch=3)
    )
    stale = response(
        await handle(
            broker,
            ApiKeys.LEADER_AND_ISR,
            leader_and_isr_request(FOLLOWER, 2, [1], [0, 1], controller_epoch=2),
        ),
        m.LeaderAndIsrResponse,
    )
    assert stale.error_code == Errors.STALE_CONTROLLER_EPOCH == 11
    assert partition_errors(stale) == {TP: 11}

    bad = response(
        await handle(
            broker,
            ApiKeys.LEADER_AND_ISR,
            leader_and_isr_request(LOCAL, 1, [0], [0], topic="../x", controller_epoch=3),
        ),
        m.LeaderAndIsrResponse,
    )
    assert (bad.error_code, partition_errors(bad)) == (0, {("../x", 0): Errors.INVALID_TOPIC_EXCEPTION})
    assert not (broker.log_dir.parent / "x-0").exists()


def stop_replica_request(leader_epoch: int, delete: bool) -> m.StopReplicaRequest:
    return m.StopReplicaRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.StopReplicaRequestTopicState(
                topic_name="t",
                partition_states=[
                    m.StopReplicaRequestPartitionState(
                        partition_index=0, leader_epoch=leader_epoch, delete_partition=delete
                    )
                ],
            )
        ],
    )


async def test_stop_replica(broker: Broker) -> None:
    await lead(broker, [0], [0], epoch=5)
    fenced = response(
        await handle(broker, ApiKeys.STOP_REPLICA, stop_replica_request(4, True)), m.StopReplicaResponse
    )
    assert (fenced.error_code, partition_errors(fenced)) == (0, {TP: Errors.FENCED_LEADER_EPOCH})
    assert (broker.log_dir / "t-0").is_dir()

    deleted = response(
        await handle(broker, ApiKeys.STOP_REPLICA, stop_replica_request(5, True)), m.StopReplicaResponse
    )
    assert partition_errors(deleted) == {TP: 0}
    assert not (broker.log_dir / "t-0").exists()
    assert broker.journal_events("partition_stopped")[0]["deleted"] is True


# ------------------------------------------------------------------------------------------- PRODUCE


async def test_produce_acks_1(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1])
    first = produced(await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(3))))
    second = produced(await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(2))))
    assert (first.error_code, first.base_offset, first.log_start_offset) == (0, 0, 0)
    assert (second.error_code, second.base_offset) == (0, 3)


async def test_produce_acks_0_sends_no_response(broker: Broker) -> None:
    await lead(broker, [0], [0])
    request = await handle(broker, ApiKeys.PRODUCE, produce_request(0, batch(2)))
    assert request.done and request.response_frame is None
    assert broker.rm.partitions[TP].log_end_offset == 2


async def test_produce_with_invalid_acks(broker: Broker) -> None:
    await lead(broker, [0], [0])
    answer = produced(await handle(broker, ApiKeys.PRODUCE, produce_request(2, batch(1))))
    assert (answer.error_code, answer.base_offset) == (Errors.INVALID_REQUIRED_ACKS, -1)
    assert broker.rm.partitions[TP].log_end_offset == 0


async def test_produce_acks_all_below_min_isr(tmp_path: Path) -> None:
    broker = Broker(tmp_path, min_isr=2)
    await lead(broker, [0], [0, 1])
    answer = produced(await handle(broker, ApiKeys.PRODUCE, produce_request(-1, batch(1))))
    assert answer.error_code == Errors.NOT_ENOUGH_REPLICAS == 19
    assert answer.error_message is not None and "min.insync.replicas=2" in answer.error_message


async def test_produce_acks_all_is_answered_when_the_follower_fetches_past_it(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1])
    produce = await handle(broker, ApiKeys.PRODUCE, produce_request(-1, batch(3)))
    assert not produce.done
    follower = await handle(broker, ApiKeys.FETCH, fetch_request(FOLLOWER, 0))
    assert record_count(fetched(follower).records) == 3 and not produce.done
    await handle(broker, ApiKeys.FETCH, fetch_request(FOLLOWER, 3))
    answer = produced(produce)
    assert (answer.error_code, answer.base_offset) == (0, 0)


# --------------------------------------------------------------------------------------------- FETCH


async def test_consumer_fetch_stops_at_the_high_watermark(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1])
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(4)))
    consumer = fetched(await handle(broker, ApiKeys.FETCH, fetch_request(-1, 0)))
    assert (consumer.error_code, consumer.high_watermark, consumer.records) == (0, 0, b"")

    follower = fetched(await handle(broker, ApiKeys.FETCH, fetch_request(FOLLOWER, 4)))
    assert follower.high_watermark == 4  # the follower's fetch offset moved the HW
    consumer = fetched(await handle(broker, ApiKeys.FETCH, fetch_request(-1, 0)))
    assert (consumer.high_watermark, record_count(consumer.records)) == (4, 4)


async def test_fetch_offset_out_of_range_and_fenced_epoch(broker: Broker) -> None:
    await lead(broker, [0], [0], epoch=3)
    assert (
        fetched(await handle(broker, ApiKeys.FETCH, fetch_request(-1, 1))).error_code
        == Errors.OFFSET_OUT_OF_RANGE
    )
    fenced = fetched(await handle(broker, ApiKeys.FETCH, fetch_request(-1, 0, current_leader_epoch=2)))
    assert fenced.error_code == Errors.FENCED_LEADER_EPOCH == 74


async def test_full_fetch_creates_a_session_and_describe_replica_state_counts_it(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1])
    session = response(
        await handle(broker, ApiKeys.FETCH, fetch_request(FOLLOWER, 0, session_epoch=0)), m.FetchResponse
    )
    assert session.session_id != 0

    state = response(
        await handle(broker, ApiKeys.DESCRIBE_REPLICA_STATE, m.DescribeReplicaStateRequest()),
        m.DescribeReplicaStateResponse,
    )
    assert state.broker_id == LOCAL
    assert (state.fetch_sessions.count, state.fetch_sessions.partitions_cached) == (1, 1)
    [partition] = state.partitions
    assert (partition.topic, partition.partition, partition.role, partition.isr) == ("t", 0, "leader", [0, 1])
    assert [f.broker_id for f in partition.followers] == [FOLLOWER]

    only_other = m.DescribeReplicaStateRequest(topics=[m.DescribeReplicaStateRequestTopic(name="other")])
    assert (
        response(
            await handle(broker, ApiKeys.DESCRIBE_REPLICA_STATE, only_other), m.DescribeReplicaStateResponse
        ).partitions
        == []
    )


# -------------------------------------------------------------------- LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH


def list_offsets_request(replica_id: int, timestamp: int) -> m.ListOffsetsRequest:
    return m.ListOffsetsRequest(
        replica_id=replica_id,
        topics=[
            m.ListOffsetsRequestTopic(
                name="t", partitions=[m.ListOffsetsRequestPartition(partition_index=0, timestamp=timestamp)]
            )
        ],
    )


async def list_offset(b: Broker, replica_id: int, timestamp: int) -> m.ListOffsetsResponsePartition:
    [topic] = response(
        await handle(b, ApiKeys.LIST_OFFSETS, list_offsets_request(replica_id, timestamp)),
        m.ListOffsetsResponse,
    ).topics
    [partition] = topic.partitions
    return partition


async def test_list_offsets(broker: Broker) -> None:
    await lead(broker, [0, 1], [0, 1], epoch=2)
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(5)))
    await handle(broker, ApiKeys.FETCH, fetch_request(FOLLOWER, 2))  # HW 2, LEO 5

    consumer = await list_offset(broker, -1, LATEST_TIMESTAMP)
    assert (consumer.error_code, consumer.offset, consumer.leader_epoch, consumer.timestamp) == (0, 2, 2, -1)
    assert (await list_offset(broker, FOLLOWER, LATEST_TIMESTAMP)).offset == 5  # a replica: the LEO
    assert (await list_offset(broker, DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP)).offset == 5
    earliest = await list_offset(broker, -1, EARLIEST_TIMESTAMP)
    assert (earliest.offset, earliest.leader_epoch) == (0, 2)
    by_time = await list_offset(broker, -1, 999)  # the first record at or after that timestamp (1,000)
    assert (by_time.error_code, by_time.offset, by_time.leader_epoch, by_time.timestamp) == (0, 0, 2, 1_000)
    after = await list_offset(broker, -1, 1_001)  # none: Kafka answers -1 for offset, epoch and timestamp
    assert (after.error_code, after.offset, after.leader_epoch, after.timestamp) == (0, -1, -1, -1)
    assert (await list_offset(broker, -1, -7)).error_code == Errors.UNSUPPORTED_VERSION

    await handle(broker, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(FOLLOWER, 3, [1, 0], [0, 1]))
    not_leader = await list_offset(broker, -1, LATEST_TIMESTAMP)
    assert (not_leader.error_code, not_leader.offset) == (Errors.NOT_LEADER_OR_FOLLOWER, -1)
    assert (await list_offset(broker, DEBUGGING_REPLICA_ID, LATEST_TIMESTAMP)).offset == 5  # any replica


async def test_offset_for_leader_epoch(broker: Broker) -> None:
    await lead(broker, [0], [0, 1], epoch=1)
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(3)))
    await lead(broker, [0], [0, 1], epoch=2)
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(1)))

    request = m.OffsetForLeaderEpochRequest(
        replica_id=FOLLOWER,
        topics=[
            m.OffsetForLeaderEpochRequestTopic(
                topic="t",
                partitions=[
                    m.OffsetForLeaderEpochRequestPartition(
                        partition=0, current_leader_epoch=2, leader_epoch=1
                    ),
                    m.OffsetForLeaderEpochRequestPartition(
                        partition=0, current_leader_epoch=2, leader_epoch=2
                    ),
                    m.OffsetForLeaderEpochRequestPartition(
                        partition=0, current_leader_epoch=1, leader_epoch=1
                    ),
                    m.OffsetForLeaderEpochRequestPartition(partition=1, leader_epoch=1),
                ],
            )
        ],
    )
    [topic] = response(
        await handle(broker, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request), m.OffsetForLeaderEpochResponse
    ).topics
    assert [(p.error_code, p.leader_epoch, p.end_offset) for p in topic.partitions] == [
        (0, 1, 3),  # epoch 1 ends where epoch 2 starts
        (0, 2, 4),  # the latest epoch ends at the LEO
        (Errors.FENCED_LEADER_EPOCH, -1, -1),
        (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]


@pytest.mark.parametrize("replica_id", [FOLLOWER, -1, DEBUGGING_REPLICA_ID])
async def test_offset_for_leader_epoch_is_answered_by_the_leader_only(
    broker: Broker, replica_id: int
) -> None:
    await lead(broker, [0], [0, 1], epoch=1)
    await handle(broker, ApiKeys.PRODUCE, produce_request(1, batch(3)))
    await handle(broker, ApiKeys.LEADER_AND_ISR, leader_and_isr_request(FOLLOWER, 2, [1, 0], [0, 1]))
    request = m.OffsetForLeaderEpochRequest(
        replica_id=replica_id,
        topics=[
            m.OffsetForLeaderEpochRequestTopic(
                topic="t", partitions=[m.OffsetForLeaderEpochRequestPartition(partition=0, leader_epoch=1)]
            )
        ],
    )
    [topic] = response(
        await handle(broker, ApiKeys.OFFSET_FOR_LEADER_EPOCH, request), m.OffsetForLeaderEpochResponse
    ).topics
    [answer] = topic.partitions
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (
        Errors.NOT_LEADER_OR_FOLLOWER,
        -1,
        -1,
    )


# ---------------------------------------------------------------------------- UPDATE_METADATA, METADATA


def metadata_partition(index: int, leader: int, replicas: list[int]) -> m.UpdateMetadataRequestPartitionState:
    return m.UpdateMetadataRequestPartitionState(
        partition_index=index,
        controller_epoch=1,
        leader=leader,
        leader_epoch=4,
        isr=[leader],
        replicas=replicas,
    )


async def test_update_metadata_then_metadata(broker: Broker) -> None:
    update = m.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.UpdateMetadataRequestTopicState(
                topic_name="t",
                partition_states=[metadata_partition(0, 1, [0, 1]), metadata_partition(1, 2, [1, 2])],
            )
        ],
        live_brokers=[
            m.UpdateMetadataRequestBroker(id=0, host="127.0.0.1", port=9000),
            m.UpdateMetadataRequestBroker(id=1, host="127.0.0.1", port=9001),
        ],
    )
    updated = response(await handle(broker, ApiKeys.UPDATE_METADATA, update), m.UpdateMetadataResponse)
    assert updated.error_code == 0

    wanted = m.MetadataRequest(topics=[m.MetadataRequestTopic(name="t"), m.MetadataRequestTopic(name="gone")])
    metadata = response(await handle(broker, ApiKeys.METADATA, wanted), m.MetadataResponse)
    assert metadata.controller_id == 9
    assert sorted(b.node_id for b in metadata.brokers) == [0, 1]
    t, gone = metadata.topics
    assert (gone.name, gone.error_code) == ("gone", Errors.UNKNOWN_TOPIC_OR_PARTITION)
    led, leaderless = t.partitions
    assert (led.error_code, led.leader_id, led.leader_epoch, led.offline_replicas) == (0, 1, 4, [])
    # Its leader, broker 2, is not among the live brokers: no leader to send to, and 2 is offline.
    assert (leaderless.error_code, leaderless.offline_replicas) == (Errors.LEADER_NOT_AVAILABLE, [2])

    stale = m.UpdateMetadataRequest(controller_id=8, controller_epoch=0, topic_states=[], live_brokers=[])
    refused = response(await handle(broker, ApiKeys.UPDATE_METADATA, stale), m.UpdateMetadataResponse)
    assert refused.error_code == Errors.STALE_CONTROLLER_EPOCH
    after = response(await handle(broker, ApiKeys.METADATA, m.MetadataRequest()), m.MetadataResponse)
    assert after.controller_id == 9 and len(after.brokers) == 2


async def test_metadata_answers_with_the_addresses_on_the_listener_it_arrived_on(broker: Broker) -> None:
    def endpoints(n: int) -> list[m.UpdateMetadataRequestEndpoint]:
        return [
            m.UpdateMetadataRequestEndpoint(listener="INTERNAL", host=f"broker-{n}", port=19092),
            m.UpdateMetadataRequestEndpoint(listener="EXTERNAL", host="localhost", port=19090 + n),
        ]

    update = m.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[],
        live_brokers=[
            # host/port stay the inter-broker address; endpoints name every listener
            m.UpdateMetadataRequestBroker(id=1, host="broker-1", port=19092, endpoints=endpoints(1)),
            m.UpdateMetadataRequestBroker(id=2, host="broker-2", port=19092, endpoints=endpoints(2)),
            # only an internal listener: left out of answers on EXTERNAL (Kafka's rule)
            m.UpdateMetadataRequestBroker(
                id=3,
                host="broker-3",
                port=19092,
                endpoints=[m.UpdateMetadataRequestEndpoint(listener="INTERNAL", host="broker-3", port=19092)],
            ),
            # no endpoints (an older sender): its one address on every listener
            m.UpdateMetadataRequestBroker(id=4, host="10.0.0.4", port=9092),
        ],
    )
    assert (
        response(await handle(broker, ApiKeys.UPDATE_METADATA, update), m.UpdateMetadataResponse).error_code
        == 0
    )

    async def brokers_on(listener: str) -> dict[int, tuple[str, int]]:
        request = make_request(ApiKeys.METADATA, m.MetadataRequest(), listener_name=listener)
        await broker.apis.handle(request)
        answer = response(request, m.MetadataResponse)
        return {b.node_id: (b.host, b.port) for b in answer.brokers if b.node_id != LOCAL}

    assert await brokers_on("EXTERNAL") == {
        1: ("localhost", 19091),
        2: ("localhost", 19092),
        4: ("10.0.0.4", 9092),
    }
    assert await brokers_on("INTERNAL") == {
        1: ("broker-1", 19092),
        2: ("broker-2", 19092),
        3: ("broker-3", 19092),
        4: ("10.0.0.4", 9092),
    }
    # the fetchers keep connecting to the inter-broker address
    assert broker.rm.metadata_cache.alive_broker(1) is not None
    assert broker.rm.metadata_cache.alive_broker(1).host == "broker-1"  # type: ignore[union-attr]

    # a LEADER_AND_ISR's live_leaders (no listeners) leaves the known listeners alone
    await lead(broker, [0, 1], [0, 1])
    assert (await brokers_on("EXTERNAL"))[1] == ("localhost", 19091)
