"""The topic configs isrsim accepts, as Kafka's ``LogConfig`` defines them: each key's type (Kafka's
``ConfigType``, what DescribeConfigs v3+ shows), default, check, documentation, and the broker key that
stands in for it when the topic does not set it (Kafka's synonyms: ``retention.ms`` <- ``log.retention.ms``
...). docs/storage.md says which of them are enforced."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from protocol.config_messages import DYNAMIC_BROKER_KEYS

# Kafka's ConfigType as DescribeConfigs v3+ carries it (ConfigResource.Type is another enum).
CONFIG_TYPE_UNKNOWN = 0
CONFIG_TYPE_BOOLEAN = 1
CONFIG_TYPE_STRING = 2
CONFIG_TYPE_INT = 3
CONFIG_TYPE_SHORT = 4
CONFIG_TYPE_LONG = 5
CONFIG_TYPE_DOUBLE = 6
CONFIG_TYPE_LIST = 7
CONFIG_TYPE_CLASS = 8
CONFIG_TYPE_PASSWORD = 9

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1

Check = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    config_type: int
    default: str
    check: Check
    documentation: str
    # the broker key whose value a topic without its own takes (Kafka's LogConfig synonym)
    broker_synonym: str | None = None


def _number(kind: int, low: int | None = None) -> Check:
    top = _INT_MAX if kind == CONFIG_TYPE_INT else _LONG_MAX

    def check(value: str) -> str | None:
        try:
            n = int(value.strip())
        except ValueError:
            return f"Not a number of type {'INT' if kind == CONFIG_TYPE_INT else 'LONG'}"
        if not -top - 1 <= n <= top:
            return f"Not a number of type {'INT' if kind == CONFIG_TYPE_INT else 'LONG'}"
        if low is not None and n < low:
            return f"Value must be at least {low}"
        return None

    return check


def _ratio(value: str) -> str | None:
    try:
        x = float(value.strip())
    except ValueError:
        return "Not a number of type DOUBLE"
    return None if 0.0 <= x <= 1.0 else "Value must be between 0.0 and 1.0"


def _bool(value: str) -> str | None:
    return None if value.strip().lower() in ("true", "false") else "Expected value to be either true or false"


def _one_of(*names: str, lower: bool = False) -> Check:
    def check(value: str) -> str | None:
        v = value.strip().lower() if lower else value.strip()
        return None if v in names else f"String must be one of: {', '.join(names)}"

    return check


def _cleanup_policy(value: str) -> str | None:
    items = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in items if p not in ("compact", "delete")]
    if bad:
        return f"Invalid value {bad[0]} for cleanup.policy: it must be compact, delete or both"
    return None


def cleanup_policy_items(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


TOPIC_CONFIG_DEFS: dict[str, TopicConfigDef] = {
    d.name: d
    for d in (
        TopicConfigDef(
            "cleanup.policy",
            CONFIG_TYPE_LIST,
            "delete",
            _cleanup_policy,
            "delete: old segments are deleted by retention.ms and retention.bytes; compact: the log cleaner "
            "keeps the latest record per key; both: both.",
            "log.cleanup.policy",
        ),
        TopicConfigDef(
            "compression.type",
            CONFIG_TYPE_STRING,
            "producer",
            _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer", lower=True),
            "The codec the leader stores batches in; producer keeps the producer's.",
            "compression.type",
        ),
        TopicConfigDef(
            "delete.retention.ms",
            CONFIG_TYPE_LONG,
            "86400000",
            _number(CONFIG_TYPE_LONG, 0),
            "How long the cleaner keeps a tombstone (or an empty transaction's marker) once it has seen it.",
            "log.cleaner.delete.retention.ms",
        ),
        TopicConfigDef(
            "max.message.bytes",
            CONFIG_TYPE_INT,
            "1048588",
            _number(CONFIG_TYPE_INT, 0),
            "The largest record batch the leader accepts (MESSAGE_TOO_LARGE beyond it).",
            "message.max.bytes",
        ),
        TopicConfigDef(
            "message.timestamp.type",
            CONFIG_TYPE_STRING,
            "CreateTime",
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the leader's clock.",
            "log.message.timestamp.type",
        ),
        TopicConfigDef(
            "min.cleanable.dirty.ratio",
            CONFIG_TYPE_DOUBLE,
            "0.5",
            _ratio,
            "The share of a compacted log not yet cleaned before the cleaner cleans it.",
            "log.cleaner.min.cleanable.ratio",
        ),
        TopicConfigDef(
            "min.compaction.lag.ms",
            CONFIG_TYPE_LONG,
            "0",
            _number(CONFIG_TYPE_LONG, 0),
            "How long a record stays uncompacted at least (segments newer than this are not cleaned).",
            "log.cleaner.min.compaction.lag.ms",
        ),
        TopicConfigDef(
            "max.compaction.lag.ms",
            CONFIG_TYPE_LONG,
            str(_LONG_MAX),
            _number(CONFIG_TYPE_LONG, 1),
            "A log whose oldest dirty segment is older than this is cleaned whatever its dirty ratio.",
            "log.cleaner.max.compaction.lag.ms",
        ),
        TopicConfigDef(
            "min.insync.replicas",
            CONFIG_TYPE_INT,
            "1",
            _number(CONFIG_TYPE_INT, 1),
            "The fewest in-sync replicas an acks=all produce needs (NOT_ENOUGH_REPLICAS below).",
            "min.insync.replicas",
        ),
        TopicConfigDef(
            "retention.bytes",
            CONFIG_TYPE_LONG,
            "-1",
            _number(CONFIG_TYPE_LONG),
            "The largest a partition's log may grow before its oldest segments are deleted; -1: no limit.",
            "log.retention.bytes",
        ),
        TopicConfigDef(
            "retention.ms",
            CONFIG_TYPE_LONG,
            "604800000",
            _number(CONFIG_TYPE_LONG, -1),
            "How long a segment is kept after its newest record's timestamp; -1: no limit.",
            "log.retention.ms",
        ),
        TopicConfigDef(
            "segment.bytes",
            CONFIG_TYPE_INT,
            "1073741824",
            _number(CONFIG_TYPE_INT, 14),
            "The size of a segment file; retention deletes whole segments.",
            "log.segment.bytes",
        ),
        TopicConfigDef(
            "segment.ms",
            CONFIG_TYPE_LONG,
            "604800000",
            _number(CONFIG_TYPE_LONG, 1),
            "The active segment is rolled at the next append once it is this old.",
            "log.roll.ms",
        ),
        TopicConfigDef(
            "unclean.leader.election.enable",
            CONFIG_TYPE_BOOLEAN,
            "false",
            _bool,
            "Whether a replica out of the ISR may be elected leader as a last resort (data loss).",
            "unclean.leader.election.enable",
        ),
    )
}

__all__ = [
    "CONFIG_TYPE_BOOLEAN",
    "CONFIG_TYPE_DOUBLE",
    "CONFIG_TYPE_INT",
    "CONFIG_TYPE_LIST",
    "CONFIG_TYPE_LONG",
    "CONFIG_TYPE_STRING",
    "CONFIG_TYPE_UNKNOWN",
    "DYNAMIC_BROKER_CONFIG_DEFS",
    "TOPIC_CONFIG_DEFS",
    "TopicConfigDef",
    "cleanup_policy_items",
]


# The broker keys a BROKER resource may change with AlterConfigs / IncrementalAlterConfigs (Kafka's dynamic
# log configs, DynamicLogConfig): for every broker (resource name "", the cluster default) or one (its id).
# Each is the default of a topic config (its synonym); ``log.retention.ms`` -1 means no limit.
DYNAMIC_BROKER_CONFIG_DEFS: dict[str, TopicConfigDef] = {
    d.broker_synonym: TopicConfigDef(
        d.broker_synonym,
        d.config_type,
        d.default,
        _number(CONFIG_TYPE_INT, 1024) if d.name == "segment.bytes" else d.check,
        d.documentation,
        None,
    )
    for d in TOPIC_CONFIG_DEFS.values()
    if d.broker_synonym is not None and d.broker_synonym in DYNAMIC_BROKER_KEYS
}
