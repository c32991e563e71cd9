"""Topic configs for a managed broker: when it starts hosting a topic, it asks the controller for the topic's
configs (DESCRIBE_CONFIGS) and applies them, as Kafka's brokers apply topic-level overrides they learn from
the metadata log; a change made later (AlterConfigs, IncrementalAlterConfigs) comes with the
UPDATE_METADATA the controller sends about the topic. Until the answer arrives a partition uses the
broker's own settings. Also: the broker's log settings from its keys and a topic's from its configs
(``log_config_for``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

import trio

from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.common import error_name
from protocol.errors import Errors
from protocol.schema import from_body
from server.backoff import ExponentialBackoff
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel
from storage.log import LogConfig

log = logging.getLogger(__name__)


class TopicConfigFetcher:
    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        apply: Callable[[str, dict[str, str]], None],
        *,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.broker_id = broker_id
        self.channel = channel
        self.apply = apply
        self.retry_backoff_s = retry_backoff_s
        self.known: set[str] = set()
        self.wanted: set[str] = set()
        self._wake = trio.Event()

    def want(self, topic: str) -> None:
        """Ask for ``topic``'s configs (once; later changes come with UPDATE_METADATA)."""
        if topic not in self.known and topic not in self.wanted:
            self.wanted.add(topic)
            self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        backoff = ExponentialBackoff(self.retry_backoff_s)
        while True:
            while not self.wanted:
                await self._wake.wait()
                self._wake = trio.Event()
            topics = sorted(self.wanted)
            request = cm.DescribeConfigsRequest(
                resources=[
                    cm.DescribeConfigsRequestResource(resource_type=cm.CONFIG_RESOURCE_TOPIC, resource_name=t)
                    for t in topics
                ]
            )
            try:
                body = await self.channel.request(ApiKeys.DESCRIBE_CONFIGS, request)
                resp = from_body(cm.DescribeConfigsResponse, body)
            except CONTROLLER_UNREACHABLE as exc:
                log.info("broker %d: DESCRIBE_CONFIGS not answered (%r); will retry", self.broker_id, exc)
                await trio.sleep(backoff.next_s())
                continue
            backoff.reset()
            for result in resp.results:
                topic = result.resource_name
                self.wanted.discard(topic)
                if result.error_code != Errors.NONE:
                    log.info(
                        "broker %d: no configs for topic %s: %s %s",
                        self.broker_id,
                        topic,
                        error_name(result.error_code),
                        result.error_message or "",
                    )
                    continue
                self.known.add(topic)
                # Only the topic's own values: for the rest the broker's own setting applies, as in Kafka.
                self.apply(
                    topic,
                    {
                        c.name: c.value
                        for c in result.configs
                        if c.value is not None and c.config_source == cm.CONFIG_SOURCE_TOPIC
                    },
                )

    def forget(self, topic: str) -> None:
        """The topic was deleted here: a topic created again with that name is asked for afresh."""
        self.known.discard(topic)
        self.wanted.discard(topic)


# A topic config's field of the log's LogConfig (Kafka's LogConfig), and the broker key that is its default.
_LOG_CONFIG_FIELDS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "max.message.bytes": "max_message_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "cleanup.policy": "cleanup_policy",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "max.compaction.lag.ms": "max_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
}


def log_config_for(base: LogConfig, configs: Mapping[str, str]) -> LogConfig:
    """The log settings of a topic: the broker's ``base`` with the topic's own values of ``segment.bytes``,
    ``segment.ms``, ``max.message.bytes``, ``retention.ms``, ``retention.bytes``, ``cleanup.policy`` and the
    cleaner's ``delete.retention.ms``, ``min.compaction.lag.ms``, ``max.compaction.lag.ms``,
    ``min.cleanable.dirty.ratio`` (a value that does not parse keeps the broker's, with a warning: the
    controller checked it)."""
    changes: dict[str, object] = {}
    for key, attr in _LOG_CONFIG_FIELDS.items():
        raw = configs.get(key)
        if raw is None:
            continue
        if attr == "cleanup_policy":
            changes[attr] = raw.strip()
            continue
        try:
            changes[attr] = float(raw.strip()) if attr == "min_cleanable_dirty_ratio" else int(raw.strip())
        except ValueError:
            log.warning("topic config %s=%r is not a number: the broker's value applies", key, raw)
    return replace(base, **changes) if changes else base  # type: ignore[arg-type]


def broker_log_config(get: Callable[[str], object]) -> LogConfig:
    """The broker's log settings from its keys (Kafka's precedence: ``log.retention.ms`` over
    ``log.retention.minutes`` over ``log.retention.hours``; ``log.roll.ms`` over ``log.roll.hours``)."""

    def number(key: str) -> int | None:
        value = get(key)
        return None if value is None else int(str(value))

    retention_ms = number("log.retention.ms")
    if retention_ms is None:
        minutes = number("log.retention.minutes")
        retention_ms = (
            minutes * 60_000 if minutes is not None else (number("log.retention.hours") or 0) * 3_600_000
        )
    retention_ms = max(retention_ms, -1)  # any negative value: no limit
    retention_bytes = number("log.retention.bytes")
    roll_ms = number("log.roll.ms")
    if roll_ms is None:
        roll_ms = (number("log.roll.hours") or 168) * 3_600_000
    return LogConfig(
        segment_bytes=number("log.segment.bytes") or LogConfig.segment_bytes,
        index_interval_bytes=number("log.index.interval.bytes") or LogConfig.index_interval_bytes,
        max_message_bytes=number("message.max.bytes") or LogConfig.max_message_bytes,
        segment_ms=roll_ms,
        retention_ms=retention_ms,
        retention_bytes=-1 if retention_bytes is None else retention_bytes,
        cleanup_policy=str(get("log.cleanup.policy") or "delete"),
        delete_retention_ms=_or(number("log.cleaner.delete.retention.ms"), LogConfig.delete_retention_ms),
        min_compaction_lag_ms=_or(
            number("log.cleaner.min.compaction.lag.ms"), LogConfig.min_compaction_lag_ms
        ),
        max_compaction_lag_ms=_or(
            number("log.cleaner.max.compaction.lag.ms"), LogConfig.max_compaction_lag_ms
        ),
        min_cleanable_dirty_ratio=float(str(get("log.cleaner.min.cleanable.ratio") or "0.5")),
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def broker_topic_defaults(
    get: Callable[[str], object], source_of: Callable[[str], int | None]
) -> dict[str, tuple[str, int]]:
    """The topic configs whose default this broker's keys change, by topic config name, with the value
    and the DescribeConfigs source of the key that sets it (``source_of``: STATIC_BROKER_CONFIG,
    DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, or None for a key left at its default; the first
    of a topic config's keys that is set wins, as ``log.retention.ms`` over ``.minutes`` over ``.hours``)."""
    base = broker_log_config(get)
    out: dict[str, tuple[str, int]] = {}
    keys = {
        "segment.bytes": (("log.segment.bytes",), str(base.segment_bytes)),
        "segment.ms": (("log.roll.ms", "log.roll.hours"), str(base.segment_ms)),
        "max.message.bytes": (("message.max.bytes",), str(base.max_message_bytes)),
        "retention.ms": (
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
            str(base.retention_ms),
        ),
        "retention.bytes": (("log.retention.bytes",), str(base.retention_bytes)),
        "cleanup.policy": (("log.cleanup.policy",), base.cleanup_policy),
        "delete.retention.ms": (
            ("log.cleaner.delete.retention.ms",),
            str(get("log.cleaner.delete.retention.ms")),
        ),
        "min.compaction.lag.ms": (
            ("log.cleaner.min.compaction.lag.ms",),
            str(get("log.cleaner.min.compaction.lag.ms")),
        ),
        "min.cleanable.dirty.ratio": (
            ("log.cleaner.min.cleanable.ratio",),
            str(get("log.cleaner.min.cleanable.ratio")),
        ),
        "max.compaction.lag.ms": (
            ("log.cleaner.max.compaction.lag.ms",),
            str(base.max_compaction_lag_ms),
        ),
    }
    for topic_key, (broker_keys, value) in keys.items():
        sources = [src for k in broker_keys if (src := source_of(k)) is not None]
        if sources:
            out[topic_key] = (value, sources[0])
    return out
