"""Bodies of Kafka's config-changing APIs (docs/protocol.md): ALTER_CONFIGS (33), which replaces a resource's
whole set of configs, and INCREMENTAL_ALTER_CONFIGS (44), which sets, deletes, appends to or subtracts from
single keys. A client sends them to any broker, which forwards them to the active controller (KIP-590)."""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int8, Int16, Int32

# Kafka's ConfigResource types.
CONFIG_RESOURCE_TOPIC = 2
CONFIG_RESOURCE_BROKER = 4

# The broker keys a BROKER resource accepts (Kafka's dynamic log configs): for every broker (resource name
# "", DYNAMIC_DEFAULT_BROKER_CONFIG) or one (its id, DYNAMIC_BROKER_CONFIG); docs/storage.md.
DYNAMIC_BROKER_KEYS: tuple[str, ...] = (
    "log.retention.ms",
    "log.retention.bytes",
    "log.segment.bytes",
    "log.roll.ms",
    "message.max.bytes",
    "log.cleanup.policy",
    "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio",
    "log.cleaner.max.compaction.lag.ms",
)
# Kafka's DescribeConfigs sources of dynamic broker configs.
CONFIG_SOURCE_DYNAMIC_BROKER = 2
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER = 3

# IncrementalAlterConfigs' operations (Kafka's AlterConfigOp.OpType).
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3


@dataclass(slots=True, kw_only=True)
class AlterableConfig:
    """One key of an ALTER_CONFIGS resource: ``value`` None removes the key (its default applies)."""

    name: str
    value: str | None = None


@dataclass(slots=True, kw_only=True)
class AlterConfigsResource:
    resource_type: Int8
    resource_name: str
    configs: list[AlterableConfig] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AlterConfigsRequest:
    resources: list[AlterConfigsResource]
    validate_only: bool = False


@dataclass(slots=True, kw_only=True)
class AlterConfigsResourceResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str


@dataclass(slots=True, kw_only=True)
class AlterConfigsResponse:
    throttle_time_ms: Int32 = 0
    responses: list[AlterConfigsResourceResponse] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class IncrementalAlterableConfig:
    """``config_operation``: OP_SET, OP_DELETE, OP_APPEND or OP_SUBTRACT (the last two for list configs)."""

    name: str
    config_operation: Int8 = field(default=OP_SET, metadata={"min": 0, "max": 3})
    value: str | None = None


@dataclass(slots=True, kw_only=True)
class IncrementalAlterConfigsResource:
    resource_type: Int8
    resource_name: str
    configs: list[IncrementalAlterableConfig] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class IncrementalAlterConfigsRequest:
    resources: list[IncrementalAlterConfigsResource]
    validate_only: bool = False


@dataclass(slots=True, kw_only=True)
class IncrementalAlterConfigsResponse:
    throttle_time_ms: Int32 = 0
    responses: list[AlterConfigsResourceResponse] = field(default_factory=list)


__all__ = [
    "CONFIG_RESOURCE_BROKER",
    "CONFIG_RESOURCE_TOPIC",
    "CONFIG_SOURCE_DYNAMIC_BROKER",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER",
    "DYNAMIC_BROKER_KEYS",
    "OP_APPEND",
    "OP_DELETE",
    "OP_SET",
    "OP_SUBTRACT",
    "AlterConfigsRequest",
    "AlterConfigsResource",
    "AlterConfigsResourceResponse",
    "AlterConfigsResponse",
    "AlterableConfig",
    "IncrementalAlterConfigsRequest",
    "IncrementalAlterConfigsResource",
    "IncrementalAlterConfigsResponse",
    "IncrementalAlterableConfig",
]
