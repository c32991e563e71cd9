"""A broker's retention: a topic's configs from UPDATE_METADATA become its logs' settings at once, and the
retention pass deletes below the HW, checkpoints and journals the new log start."""

from __future__ import annotations

from pathlib import Path

from broker.topic_configs import TopicConfigFetcher
from protocol import messages as m
from protocol.api_keys import ApiKeys
from storage.log_manager import LOG_START_CHECKPOINT
from tests.unit.broker.broker_support import LOCAL, TP, Broker, batch, make_request, response


def update_metadata(
    configs: dict[str, str] | None, broker_configs: dict[str, dict[str, str]] | None = None
) -> m.UpdateMetadataRequest:
    return m.UpdateMetadataRequest(
        controller_id=9,
        controller_epoch=1,
        topic_states=[
            m.UpdateMetadataRequestTopicState(
                topic_name=TP[0],
                partition_states=[
                    m.UpdateMetadataRequestPartitionState(
                        partition_index=TP[1],
                        controller_epoch=1,
                        leader=LOCAL,
                        leader_epoch=1,
                        isr=[LOCAL],
                        replicas=[LOCAL],
                    )
                ],
                configs=configs,
            )
        ],
        live_brokers=[m.UpdateMetadataRequestBroker(id=LOCAL, host="127.0.0.1", port=9000)],
        broker_configs=None
        if broker_configs is None
        else [
            m.UpdateMetadataRequestBrokerConfigs(resource_name=name, configs=configs)
            for name, configs in broker_configs.items()
        ],
    )


async def test_configs_from_update_metadata_drive_retention(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL])
    partition = b.rm.partitions[TP]
    configs = {"segment.bytes": "300", "retention.bytes": "600"}
    request = make_request(ApiKeys.UPDATE_METADATA, update_metadata(configs))
    await b.apis.handle(request)
    assert response(request, m.UpdateMetadataResponse).error_code == 0
    assert (partition.log.config.segment_bytes, partition.log.config.retention_bytes) == (300, 600)
    assert b.log_manager.config.segment_bytes != 300  # the broker's own settings are untouched
    for _ in range(12):
        b.rm.append_records(30_000, 1, {TP: batch(5)}, lambda statuses: None)
    assert partition.high_watermark == partition.log_end_offset == 60
    before = len(partition.log.segments)
    moved = b.rm.cleanup_logs()
    assert moved == {TP: partition.log.log_start_offset} and partition.log.log_start_offset > 0
    assert len(partition.log.segments) < before
    assert 600 <= partition.log.size_in_bytes < 600 + 300
    assert b.log_manager.log_start_checkpoint.read()[TP] == partition.log.log_start_offset
    assert (b.log_dir / LOG_START_CHECKPOINT).exists()
    b.rm.state_listener.flush_offsets()
    (last,) = b.journal_events("offsets")[-1:]
    assert last["log_start_offset"] == partition.log.log_start_offset
    # the configs removed: the broker's defaults again, nothing more is deleted
    request = make_request(ApiKeys.UPDATE_METADATA, update_metadata({}))
    await b.apis.handle(request)
    assert partition.log.config is b.log_manager.config
    assert b.rm.cleanup_logs() == {}


def test_a_managed_broker_waits_for_its_topics_configs(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    b.log_manager.config.retention_bytes = 0  # the broker's default would delete everything
    b.rm.topic_config_fetcher = TopicConfigFetcher(LOCAL, None, b.rm.apply_topic_configs)  # type: ignore[arg-type]
    b.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL])
    partition = b.rm.partitions[TP]
    for _ in range(3):
        b.rm.append_records(30_000, 1, {TP: batch(5)}, lambda statuses: None)
    partition.log.roll()
    assert b.rm.cleanup_logs() == {}  # the topic's own retention is not known yet
    b.rm.apply_topic_configs(TP[0], {"retention.bytes": "-1"})
    assert b.rm.cleanup_logs() == {}
    b.rm.apply_topic_configs(TP[0], {})
    assert b.rm.cleanup_logs() == {TP: 15}


async def test_dynamic_broker_configs_change_the_logs_where_the_topic_sets_nothing(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    static = {"log.retention.hours": 168, "log.segment.bytes": 1073741824, "message.max.bytes": 1048588}
    b.rm.static_config = static.get
    seen: list[dict[str, dict[str, str]]] = []
    b.rm.dynamic_listeners.append(seen.append)
    b.leader_and_isr(LOCAL, 1, [LOCAL], [LOCAL])
    partition = b.rm.partitions[TP]
    dynamic = {
        "": {"log.retention.ms": "5000", "log.segment.bytes": "2048"},
        str(LOCAL): {"log.segment.bytes": "4096"},
    }
    request = make_request(ApiKeys.UPDATE_METADATA, update_metadata({"retention.ms": "-1"}, dynamic))
    await b.apis.handle(request)
    assert response(request, m.UpdateMetadataResponse).error_code == 0
    assert b.log_manager.config.retention_ms == 5000  # the dynamic default wins over log.retention.hours
    assert b.log_manager.config.segment_bytes == 4096  # this broker's own wins over the cluster default
    assert partition.log.config.retention_ms == -1  # the topic's own value wins over both
    assert partition.log.config.segment_bytes == 4096
    assert seen == [dynamic]
    # another broker's dynamic configs do not apply here; removing them all restores the static keys
    request = make_request(ApiKeys.UPDATE_METADATA, update_metadata({}, {"7": {"log.retention.ms": "1"}}))
    await b.apis.handle(request)
    assert b.log_manager.config.retention_ms == 168 * 3_600_000
    assert partition.log.config is b.log_manager.config
