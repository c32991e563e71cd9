"""``ControllerApis`` binds a handler to every API a controller's spec says it serves (a voter's quorum APIs
only in a quorum), and to nothing else."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from controller.controller import CONTROLLER_APIS, QUORUM_REQUEST_KEYS, ControllerApis
from protocol.api_keys import ApiKeys
from protocol.api_specs import Node, node_api_versions


def _apis(voters: dict[int, Any]) -> ControllerApis:
    # Building the dispatcher reads only the voters; no handler is called.
    return ControllerApis(cast(Any, SimpleNamespace(voters=voters)))


@pytest.mark.parametrize("quorum", [False, True])
def test_the_controller_handlers_match_the_specs(quorum: bool) -> None:
    apis = _apis({1: ("127.0.0.1", 1)} if quorum else {})
    assert apis.supported == node_api_versions(Node.CONTROLLER, kafka=False, quorum=quorum)
    assert apis.kafka_supported == node_api_versions(Node.CONTROLLER, kafka=True, quorum=quorum)
    assert (ApiKeys.VOTE in apis.supported) == quorum
    assert (ApiKeys.DESCRIBE_QUORUM in apis.kafka_supported) == quorum
    assert ApiKeys.BROKER_REGISTRATION not in apis.kafka_supported  # isrsim's own body: msgpack only


def test_a_voters_quorum_apis_are_queued_apart_and_not_metered_as_the_others() -> None:
    assert {
        ApiKeys.VOTE,
        ApiKeys.BEGIN_QUORUM_EPOCH,
        ApiKeys.END_QUORUM_EPOCH,
        ApiKeys.DESCRIBE_QUORUM,
        ApiKeys.FETCH,
    } == QUORUM_REQUEST_KEYS
    assert not QUORUM_REQUEST_KEYS & set(CONTROLLER_APIS)
