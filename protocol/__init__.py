"""The wire protocol (docs/protocol.md): framing, API schemas, error codes, record batches, the async client.

This module is the package's front door for code outside the replication core (the CLI, the report): a
client's names, imported from here (``from protocol import ApiKeys, open_connection``). The broker and the
fetcher, which implement the protocol, use its modules directly.

The names load on first use, so ``import protocol`` costs nothing: a caller that only needs ``Errors``
does not load trio (``protocol.client``) or msgpack and crc32c (``protocol.records``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_exports

if TYPE_CHECKING:
    from protocol.api_keys import CONSUMER_REPLICA_ID, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ApiKeys
    from protocol.client import (
        AuthenticationFailed,
        ConnectionClosed,
        KafkaConnection,
        ResponseLost,
        open_connection,
    )
    from protocol.common import TopicPartition, error_name, wall_clock_ms
    from protocol.compression import CODEC_NAMES, CompressionType
    from protocol.consumer_protocol import (
        CONSUMER_PROTOCOL_TYPE,
        decode_assignment,
        decode_subscription,
        encode_assignment,
        encode_subscription,
        range_assign,
    )
    from protocol.control_records import decode_end_txn_marker
    from protocol.errors import RETRIABLE, CorruptRecordError, Errors, KafkaError
    from protocol.fault_injector import net_faults_set_body, rules_from_body
    from protocol.fault_messages import ProtocolFaultsResponse
    from protocol.fault_rules import (
        ProtocolFaultRule,
        RuleError,
        answer_rules,
        api_name,
        parse_api,
        parse_error,
        protocol_faults_answer,
        protocol_faults_body,
        rule_from_json,
    )
    from protocol.faults import CLIENT, CLIENTS, CONTROLLER, FaultError, FaultSet, LinkFault
    from protocol.records import (
        ATTRIBUTES_OFFSET,
        BATCH_HEADER_SIZE,
        batch_crc,
        build_simple_batch,
        decode_records,
        iter_batches,
        read_header,
    )
    from protocol.security import (
        AuthenticationError,
        ClientSecurity,
        SecurityConfigError,
        current_client_security,
    )

# Each exported name and the module that defines it (the imports above say the same to type checkers;
# tests/unit/test_layers.py checks that the two agree).
_EXPORTS: dict[str, str] = {
    "ApiKeys": "protocol.api_keys",
    "CONSUMER_REPLICA_ID": "protocol.api_keys",
    "EARLIEST_TIMESTAMP": "protocol.api_keys",
    "LATEST_TIMESTAMP": "protocol.api_keys",
    "AuthenticationFailed": "protocol.client",
    "ConnectionClosed": "protocol.client",
    "ResponseLost": "protocol.client",
    "KafkaConnection": "protocol.client",
    "open_connection": "protocol.client",
    "TopicPartition": "protocol.common",
    "CODEC_NAMES": "protocol.compression",
    "CompressionType": "protocol.compression",
    "CONSUMER_PROTOCOL_TYPE": "protocol.consumer_protocol",
    "decode_assignment": "protocol.consumer_protocol",
    "decode_subscription": "protocol.consumer_protocol",
    "encode_assignment": "protocol.consumer_protocol",
    "encode_subscription": "protocol.consumer_protocol",
    "range_assign": "protocol.consumer_protocol",
    "error_name": "protocol.common",
    "wall_clock_ms": "protocol.common",
    "CorruptRecordError": "protocol.errors",
    "KafkaError": "protocol.errors",
    "Errors": "protocol.errors",
    "RETRIABLE": "protocol.errors",
    "net_faults_set_body": "protocol.fault_injector",
    "rules_from_body": "protocol.fault_injector",
    "ProtocolFaultsResponse": "protocol.fault_messages",
    "ProtocolFaultRule": "protocol.fault_rules",
    "RuleError": "protocol.fault_rules",
    "answer_rules": "protocol.fault_rules",
    "api_name": "protocol.fault_rules",
    "parse_api": "protocol.fault_rules",
    "parse_error": "protocol.fault_rules",
    "protocol_faults_answer": "protocol.fault_rules",
    "protocol_faults_body": "protocol.fault_rules",
    "rule_from_json": "protocol.fault_rules",
    "CLIENT": "protocol.faults",
    "CLIENTS": "protocol.faults",
    "CONTROLLER": "protocol.faults",
    "FaultError": "protocol.faults",
    "FaultSet": "protocol.faults",
    "LinkFault": "protocol.faults",
    "AuthenticationError": "protocol.security",
    "ClientSecurity": "protocol.security",
    "SecurityConfigError": "protocol.security",
    "current_client_security": "protocol.security",
    "ATTRIBUTES_OFFSET": "protocol.records",
    "BATCH_HEADER_SIZE": "protocol.records",
    "batch_crc": "protocol.records",
    "build_simple_batch": "protocol.records",
    "decode_records": "protocol.records",
    "decode_end_txn_marker": "protocol.control_records",
    "iter_batches": "protocol.records",
    "read_header": "protocol.records",
}

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BATCH_HEADER_SIZE",
    "CLIENT",
    "CLIENTS",
    "CODEC_NAMES",
    "CONSUMER_PROTOCOL_TYPE",
    "CONSUMER_REPLICA_ID",
    "CONTROLLER",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "RETRIABLE",
    "ApiKeys",
    "AuthenticationError",
    "AuthenticationFailed",
    "ClientSecurity",
    "CompressionType",
    "ConnectionClosed",
    "CorruptRecordError",
    "Errors",
    "FaultError",
    "FaultSet",
    "KafkaConnection",
    "KafkaError",
    "LinkFault",
    "ProtocolFaultRule",
    "ProtocolFaultsResponse",
    "ResponseLost",
    "RuleError",
    "SecurityConfigError",
    "TopicPartition",
    "answer_rules",
    "api_name",
    "batch_crc",
    "build_simple_batch",
    "current_client_security",
    "decode_assignment",
    "decode_end_txn_marker",
    "decode_records",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "error_name",
    "iter_batches",
    "net_faults_set_body",
    "open_connection",
    "parse_api",
    "parse_error",
    "protocol_faults_answer",
    "protocol_faults_body",
    "range_assign",
    "read_header",
    "rule_from_json",
    "rules_from_body",
    "wall_clock_ms",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
