"""The broker's log settings from its keys (Kafka's precedence of log.retention.ms / .minutes / .hours and
log.roll.ms / .hours) and a topic's from its configs."""

from __future__ import annotations

from broker.topic_configs import broker_log_config, broker_topic_defaults, log_config_for
from storage.log import LogConfig

DEFAULTS: dict[str, object] = {
    "log.retention.hours": 168,
    "log.retention.minutes": None,
    "log.retention.ms": None,
    "log.retention.bytes": -1,
    "log.roll.hours": 168,
    "log.roll.ms": None,
    "log.segment.bytes": 1073741824,
    "log.index.interval.bytes": 4096,
    "message.max.bytes": 1048588,
    "log.cleanup.policy": "delete",
    "log.cleaner.delete.retention.ms": 86400000,
    "log.cleaner.min.compaction.lag.ms": 0,
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.max.compaction.lag.ms": 9223372036854775807,
}


def settings(**changes: object) -> dict[str, object]:
    return {**DEFAULTS, **{k.replace("_", "."): v for k, v in changes.items()}}


def test_kafkas_defaults() -> None:
    c = broker_log_config(DEFAULTS.get)
    assert (c.retention_ms, c.retention_bytes, c.segment_ms, c.cleanup_policy) == (
        604800000,
        -1,
        604800000,
        "delete",
    )
    assert broker_topic_defaults(DEFAULTS.get, lambda k: None) == {}


def test_retention_precedence_ms_over_minutes_over_hours() -> None:
    assert broker_log_config(settings(log_retention_hours=1).get).retention_ms == 3_600_000
    assert broker_log_config(settings(log_retention_minutes=2).get).retention_ms == 120_000
    both = settings(log_retention_minutes=2, log_retention_ms=500)
    assert broker_log_config(both.get).retention_ms == 500
    assert broker_log_config(settings(log_retention_ms=-1).get).retention_ms == -1
    assert broker_log_config(settings(log_retention_hours=-1).get).retention_ms == -1
    assert broker_log_config(settings(log_retention_bytes=0).get).retention_bytes == 0
    assert broker_log_config(settings(log_roll_hours=2).get).segment_ms == 7_200_000
    assert broker_log_config(settings(log_roll_hours=2, log_roll_ms=10).get).segment_ms == 10


def test_topic_defaults_shown_for_the_keys_the_broker_sets() -> None:
    values = settings(log_retention_minutes=2, log_segment_bytes=4096)
    shown = broker_topic_defaults(values.get, lambda k: None if values[k] == DEFAULTS[k] else 4)
    assert shown == {"retention.ms": ("120000", 4), "segment.bytes": ("4096", 4)}


def test_a_topic_overrides_the_broker() -> None:
    base = LogConfig(retention_ms=1000, segment_bytes=4096)
    assert log_config_for(base, {}) is base
    assert log_config_for(base, {"min.insync.replicas": "2"}) is base
    topic = log_config_for(
        base, {"retention.ms": "-1", "retention.bytes": "0", "segment.ms": "5", "cleanup.policy": "compact"}
    )
    assert (topic.retention_ms, topic.retention_bytes, topic.segment_ms) == (-1, 0, 5)
    assert topic.segment_bytes == 4096 and not topic.delete and topic.compact
    assert base.retention_ms == 1000  # the broker's own settings are untouched
