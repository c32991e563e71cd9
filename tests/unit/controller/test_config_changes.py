"""AlterConfigs (33) and IncrementalAlterConfigs (44) on the controller: Kafka's checks and errors, the
committed change, and the UPDATE_METADATA that carries a topic's new configs to every live broker."""

from __future__ import annotations

from controller.core import ControllerCore
from controller.state import ClusterState
from protocol import config_messages as cfm
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.unit.controller.support import create_topic, events_named, live_core, requests_by

TOPIC = cfm.CONFIG_RESOURCE_TOPIC


def incremental(
    core: ControllerCore, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> cfm.AlterConfigsResourceResponse:
    (result,) = core.incremental_alter_configs(
        cfm.IncrementalAlterConfigsRequest(
            resources=[
                cfm.IncrementalAlterConfigsResource(
                    resource_type=TOPIC,
                    resource_name=name,
                    configs=[
                        cfm.IncrementalAlterableConfig(name=k, config_operation=op, value=v)
                        for k, op, v in ops
                    ],
                )
            ],
            validate_only=validate_only,
        )
    ).responses
    return result


def described(core: ControllerCore, name: str) -> dict[str, tuple[str | None, int]]:
    (result,) = core.describe_configs(
        cm.DescribeConfigsRequest(
            resources=[cm.DescribeConfigsRequestResource(resource_type=TOPIC, resource_name=name)]
        )
    ).results
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_incremental_set_is_committed_and_sent_to_every_live_broker() -> None:
    core = live_core([1, 2, 3])
    create_topic(core, "t", 2, 2, {"min.insync.replicas": "2"})
    core.drain()
    got = incremental(core, "t", ("retention.ms", cfm.OP_SET, "1000"))
    assert (got.error_code, got.error_message) == (0, None)
    assert core.state.topics["t"].configs == {"min.insync.replicas": "2", "retention.ms": "1000"}
    effects = core.drain()
    assert effects.dirty
    (changed,) = events_named(effects, "topic_configs_changed")
    assert changed["configs"] == {"min.insync.replicas": "2", "retention.ms": "1000"}
    updates = requests_by(effects, ApiKeys.UPDATE_METADATA)
    assert set(updates) == {1, 2, 3}
    for request in updates.values():
        assert isinstance(request.body, cm.UpdateMetadataRequest)
        (state,) = request.body.topic_states
        assert state.configs == {"min.insync.replicas": "2", "retention.ms": "1000"}
        assert len(state.partition_states) == 2
    assert described(core, "t")["retention.ms"] == ("1000", cm.CONFIG_SOURCE_TOPIC)
    # DELETE takes the default back
    assert incremental(core, "t", ("retention.ms", cfm.OP_DELETE, None)).error_code == 0
    assert described(core, "t")["retention.ms"] == ("604800000", cm.CONFIG_SOURCE_DEFAULT)


def test_append_and_subtract_on_a_list_config_start_from_the_default() -> None:
    core = live_core([1])
    create_topic(core, "t", 1, 1)
    assert incremental(core, "t", ("cleanup.policy", cfm.OP_APPEND, "compact")).error_code == 0
    assert core.state.topics["t"].configs["cleanup.policy"] == "delete,compact"
    assert incremental(core, "t", ("cleanup.policy", cfm.OP_SUBTRACT, "delete")).error_code == 0
    assert core.state.topics["t"].configs["cleanup.policy"] == "compact"
    got = incremental(core, "t", ("retention.ms", cfm.OP_APPEND, "5"))
    assert got.error_code == Errors.INVALID_CONFIG
    assert got.error_message == "Config value append is not allowed for config key: retention.ms"


def test_invalid_changes_are_refused_and_change_nothing() -> None:
    core = live_core([1])
    create_topic(core, "t", 1, 1)
    core.drain()
    cases: list[tuple[tuple[str, int, str | None], Errors, str]] = [
        (
            ("retention.ms", cfm.OP_SET, "-2"),
            Errors.INVALID_CONFIG,
            "retention.ms='-2': Value must be at least -1",
        ),
        (("no.such.key", cfm.OP_SET, "1"), Errors.INVALID_CONFIG, "unknown topic config 'no.such.key'"),
        (("retention.bytes", cfm.OP_SET, None), Errors.INVALID_REQUEST, "Null value not supported"),
        (("cleanup.policy", cfm.OP_SET, "shred"), Errors.INVALID_CONFIG, "cleanup.policy='shred'"),
    ]
    for op, error, message in cases:
        got = incremental(core, "t", op)
        assert got.error_code == error, op
        assert got.error_message is not None and got.error_message.startswith(message), got.error_message
    missing = incremental(core, "nope", ("retention.ms", cfm.OP_SET, "1"))
    assert missing.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    dup = incremental(core, "t", ("retention.ms", cfm.OP_SET, "1"), ("retention.ms", cfm.OP_SET, "2"))
    assert dup.error_code == Errors.INVALID_REQUEST
    assert core.state.topics["t"].configs == {}
    effects = core.drain()
    assert not effects.dirty and not events_named(effects, "topic_configs_changed")


def test_validate_only_checks_and_changes_nothing() -> None:
    core = live_core([1])
    create_topic(core, "t", 1, 1)
    core.drain()
    assert incremental(core, "t", ("retention.ms", cfm.OP_SET, "1"), validate_only=True).error_code == 0
    assert incremental(core, "t", ("retention.ms", cfm.OP_SET, "x"), validate_only=True).error_code == 40
    assert core.state.topics["t"].configs == {}
    assert not core.drain().dirty


def test_alter_configs_replaces_the_whole_set() -> None:
    core = live_core([1])
    create_topic(core, "t", 1, 1, {"min.insync.replicas": "1", "retention.ms": "5"})
    response = core.alter_configs(
        cfm.AlterConfigsRequest(
            resources=[
                cfm.AlterConfigsResource(
                    resource_type=TOPIC,
                    resource_name="t",
                    configs=[
                        cfm.AlterableConfig(name="segment.bytes", value="1024"),
                        cfm.AlterableConfig(name="retention.bytes", value=None),
                    ],
                ),
                cfm.AlterConfigsResource(resource_type=TOPIC, resource_name="missing"),
                cfm.AlterConfigsResource(resource_type=cfm.CONFIG_RESOURCE_BROKER, resource_name="one"),
            ]
        )
    )
    codes = [(r.resource_name, r.error_code) for r in response.responses]
    assert codes == [
        ("t", 0),
        ("missing", Errors.UNKNOWN_TOPIC_OR_PARTITION),
        ("one", Errors.INVALID_REQUEST),
    ]
    assert core.state.topics["t"].configs == {"segment.bytes": "1024"}


def test_enabling_unclean_election_elects_a_leaderless_partition() -> None:
    core = live_core([1, 2])
    create_topic(core, "t", 1, 2)
    p = core.state.topics["t"].partitions[0]
    p.leader, p.isr = -1, [9]  # no leader, and no live replica in the ISR
    core.drain()
    assert incremental(core, "t", ("unclean.leader.election.enable", cfm.OP_SET, "true")).error_code == 0
    assert p.leader in (1, 2)
    (elected,) = events_named(core.drain(), "leader_elected")
    assert elected["unclean"] is True


def broker_change(
    core: ControllerCore, name: str, *ops: tuple[str, int, str | None]
) -> cfm.AlterConfigsResourceResponse:
    (result,) = core.incremental_alter_configs(
        cfm.IncrementalAlterConfigsRequest(
            resources=[
                cfm.IncrementalAlterConfigsResource(
                    resource_type=cfm.CONFIG_RESOURCE_BROKER,
                    resource_name=name,
                    configs=[
                        cfm.IncrementalAlterableConfig(name=k, config_operation=op, value=v)
                        for k, op, v in ops
                    ],
                )
            ]
        )
    ).responses
    return result


def test_dynamic_broker_configs_are_committed_and_sent_in_every_update_metadata() -> None:
    core = live_core([1, 2])
    core.drain()
    assert broker_change(core, "", ("log.retention.ms", cfm.OP_SET, "60000")).error_code == 0
    assert broker_change(core, "2", ("log.retention.bytes", cfm.OP_SET, "1000")).error_code == 0
    assert core.state.broker_configs == {
        "": {"log.retention.ms": "60000"},
        "2": {"log.retention.bytes": "1000"},
    }
    effects = core.drain()
    assert effects.dirty and len(events_named(effects, "broker_configs_changed")) == 2
    updates = requests_by(effects, ApiKeys.UPDATE_METADATA)
    assert set(updates) == {1, 2}
    for request in updates.values():
        assert isinstance(request.body, cm.UpdateMetadataRequest)
        carried = {c.resource_name: c.configs for c in request.body.broker_configs or []}
        assert carried == core.state.broker_configs
    # a key that is not dynamic, a bad value, a bad resource name: refused, nothing changes
    static = broker_change(core, "", ("num.io.threads", cfm.OP_SET, "4"))
    assert static.error_code == Errors.INVALID_CONFIG
    assert (static.error_message or "").startswith(
        "Cannot update these configs dynamically: ['num.io.threads']"
    )
    assert (
        broker_change(core, "", ("log.segment.bytes", cfm.OP_SET, "10")).error_code == Errors.INVALID_CONFIG
    )
    assert (
        broker_change(core, "x", ("log.retention.ms", cfm.OP_SET, "1")).error_code == Errors.INVALID_REQUEST
    )
    # DELETE of the last key removes the resource; the state survives a round trip through JSON
    assert broker_change(core, "2", ("log.retention.bytes", cfm.OP_DELETE, None)).error_code == 0
    assert core.state.broker_configs == {"": {"log.retention.ms": "60000"}}
    again = ClusterState.from_json(core.state.to_json())
    assert again.broker_configs == core.state.broker_configs
