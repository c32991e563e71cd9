"""``KafkaApis`` binds a handler to every API a broker's spec says it serves, and to nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.group_apis import GroupApis
from broker.txn_apis import TxnApis
from protocol.api_keys import ApiKeys
from protocol.api_specs import Node, node_api_versions
from tests.unit.broker.broker_support import Broker


def _groups() -> GroupApis:
    # Only the handler table is read here; no handler is called.
    return GroupApis.__new__(GroupApis)


def test_the_broker_handlers_match_the_specs(tmp_path: Path) -> None:
    apis = Broker(tmp_path).apis
    with pytest.raises(ValueError, match=r"no handler for .*'HEARTBEAT'"):
        apis.check_handlers()  # the group APIs are bound once the server enables them
    apis.enable_groups(_groups())
    with pytest.raises(ValueError, match=r"no handler for .*'END_TXN'"):
        apis.check_handlers()  # and the transaction APIs once the server enables them
    apis.enable_transactions(TxnApis.__new__(TxnApis))
    apis.check_handlers()
    assert apis.supported == node_api_versions(Node.BROKER, kafka=False)
    assert apis.kafka_supported == node_api_versions(Node.BROKER, kafka=True)
    assert ApiKeys.DESCRIBE_REPLICA_STATE in apis.supported
    assert ApiKeys.DESCRIBE_REPLICA_STATE not in apis.kafka_supported  # isrsim's own: msgpack only
