"""Kafka's ``ConfigurationControlManager``, pure: what AlterConfigs (33) and IncrementalAlterConfigs (44)
make of a topic's configs or of a BROKER resource's dynamic configs, or the error (Kafka's codes and
messages). The controller core applies the result as a committed metadata change."""

from __future__ import annotations

from collections import Counter

from controller.log_configs import (
    CONFIG_TYPE_LIST,
    DYNAMIC_BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    TopicConfigDef,
    cleanup_policy_items,
)
from controller.topics import validate_topic_configs
from protocol import config_messages as cfm
from protocol.errors import Errors

ConfigChange = dict[str, str] | tuple[Errors, str]


def replaced_topic_configs(configs: list[cfm.AlterableConfig], *, broker: bool = False) -> ConfigChange:
    """AlterConfigs: the topic's (``broker``: a BROKER resource's dynamic) configs become exactly those
    given (a key with a null value, or one not given, takes its default again)."""
    dup = _duplicate([c.name for c in configs])
    if dup is not None:
        return Errors.INVALID_REQUEST, f"Error due to duplicate config keys: {dup}"
    out = {c.name: c.value for c in configs if c.value is not None}
    return _checked(out, broker)


def incremental_topic_configs(
    current: dict[str, str], configs: list[cfm.IncrementalAlterableConfig], *, broker: bool = False
) -> ConfigChange:
    """IncrementalAlterConfigs: SET and DELETE one key each; APPEND and SUBTRACT add items to or remove
    them from a list config (``cleanup.policy``), starting from its current value or its default."""
    dup = _duplicate([c.name for c in configs])
    if dup is not None:
        return Errors.INVALID_REQUEST, f"Error due to duplicate config keys: {dup}"
    defs: dict[str, TopicConfigDef] = DYNAMIC_BROKER_CONFIG_DEFS if broker else TOPIC_CONFIG_DEFS
    out = dict(current)
    for c in configs:
        definition = defs.get(c.name)
        if c.config_operation == cfm.OP_DELETE:
            out.pop(c.name, None)
            continue
        if c.value is None:
            return Errors.INVALID_REQUEST, f"Null value not supported for : {c.name}"
        if c.config_operation == cfm.OP_SET:
            out[c.name] = c.value
            continue
        verb = "append" if c.config_operation == cfm.OP_APPEND else "subtract"
        if definition is None or definition.config_type != CONFIG_TYPE_LIST:
            return Errors.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {c.name}"
        items = cleanup_policy_items(out.get(c.name, definition.default))
        given = cleanup_policy_items(c.value)
        if c.config_operation == cfm.OP_APPEND:
            items += [i for i in given if i not in items]
        else:
            items = [i for i in items if i not in given]
        out[c.name] = ",".join(items)
    return _checked(out, broker)


def _checked(configs: dict[str, str], broker: bool) -> ConfigChange:
    problem = validate_broker_configs(configs) if broker else validate_topic_configs(configs)
    if problem is not None:
        return Errors.INVALID_CONFIG, problem
    return configs


def validate_broker_configs(configs: dict[str, str]) -> str | None:
    """None if every key is a dynamic broker config (DYNAMIC_BROKER_CONFIG_DEFS) with a valid value."""
    static = sorted(k for k in configs if k not in DYNAMIC_BROKER_CONFIG_DEFS)
    if static:
        dynamic = sorted(DYNAMIC_BROKER_CONFIG_DEFS)
        return f"Cannot update these configs dynamically: {static} (dynamic: {dynamic})"
    for key, value in sorted(configs.items()):
        problem = DYNAMIC_BROKER_CONFIG_DEFS[key].check(value)
        if problem is not None:
            return f"{key}={value!r}: {problem}"
    return None


def _duplicate(names: list[str]) -> str | None:
    dups = sorted(n for n, count in Counter(names).items() if count > 1)
    return ", ".join(dups) if dups else None


__all__ = ["ConfigChange", "incremental_topic_configs", "replaced_topic_configs", "validate_broker_configs"]
