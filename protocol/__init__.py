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
    from protocol.errors import RETRIABLE, CorruptRecordError, Errors
    from protocol.fault_injector import net_faults_set_body, rules_from_body
    from protocol.fault_kinds import (
        DOWN_KINDS,
        FAULT_ACTIONS,
        FAULT_KINDS,
        FAULT_RULES,
        NETWORK,
        NETWORK_KINDS,
        NODE,
        PROCESS,
        PROCESS_KINDS,
        FaultAction,
        FaultKind,
        fault_label,
    )
    from protocol.faults import CLIENT, CLIENTS, CONTROLLER, FaultError, FaultSet, LinkFault
    from protocol.file_names import (
        ACKED_FILE,
        ACLS_FILE,
        CHAOS_FILE,
        CLIENT_PROPERTIES,
        CLUSTER_FILE,
        CREDENTIALS_FILE,
        EVENTS_FILE,
        FAULTS_FILE,
        META_PROPERTIES,
        SECURITY_DIR,
    )
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
    "Errors": "protocol.errors",
    "RETRIABLE": "protocol.errors",
    "net_faults_set_body": "protocol.fault_injector",
    "rules_from_body": "protocol.fault_injector",
    "ACKED_FILE": "protocol.file_names",
    "ACLS_FILE": "protocol.file_names",
    "CHAOS_FILE": "protocol.file_names",
    "CLIENT_PROPERTIES": "protocol.file_names",
    "CLUSTER_FILE": "protocol.file_names",
    "CREDENTIALS_FILE": "protocol.file_names",
    "EVENTS_FILE": "protocol.file_names",
    "FAULTS_FILE": "protocol.file_names",
    "META_PROPERTIES": "protocol.file_names",
    "SECURITY_DIR": "protocol.file_names",
    "DOWN_KINDS": "protocol.fault_kinds",
    "FAULT_ACTIONS": "protocol.fault_kinds",
    "FAULT_KINDS": "protocol.fault_kinds",
    "FAULT_RULES": "protocol.fault_kinds",
    "NETWORK": "protocol.fault_kinds",
    "NETWORK_KINDS": "protocol.fault_kinds",
    "PROCESS": "protocol.fault_kinds",
    "NODE": "protocol.fault_kinds",
    "PROCESS_KINDS": "protocol.fault_kinds",
    "FaultAction": "protocol.fault_kinds",
    "FaultKind": "protocol.fault_kinds",
    "fault_label": "protocol.fault_kinds",
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
    "iter_batches": "protocol.records",
    "read_header": "protocol.records",
}

__all__ = [
    "ACKED_FILE",
    "ACLS_FILE",
    "ATTRIBUTES_OFFSET",
    "BATCH_HEADER_SIZE",
    "CHAOS_FILE",
    "CLIENT",
    "CLIENTS",
    "CLIENT_PROPERTIES",
    "CLUSTER_FILE",
    "CODEC_NAMES",
    "CONSUMER_PROTOCOL_TYPE",
    "CONSUMER_REPLICA_ID",
    "CONTROLLER",
    "CREDENTIALS_FILE",
    "DOWN_KINDS",
    "EARLIEST_TIMESTAMP",
    "EVENTS_FILE",
    "FAULTS_FILE",
    "FAULT_ACTIONS",
    "FAULT_KINDS",
    "FAULT_RULES",
    "LATEST_TIMESTAMP",
    "META_PROPERTIES",
    "NETWORK",
    "NETWORK_KINDS",
    "NODE",
    "PROCESS",
    "PROCESS_KINDS",
    "RETRIABLE",
    "SECURITY_DIR",
    "ApiKeys",
    "AuthenticationError",
    "AuthenticationFailed",
    "ClientSecurity",
    "CompressionType",
    "ConnectionClosed",
    "CorruptRecordError",
    "Errors",
    "FaultAction",
    "FaultError",
    "FaultKind",
    "FaultSet",
    "KafkaConnection",
    "LinkFault",
    "ResponseLost",
    "SecurityConfigError",
    "TopicPartition",
    "batch_crc",
    "build_simple_batch",
    "current_client_security",
    "decode_assignment",
    "decode_records",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "error_name",
    "fault_label",
    "iter_batches",
    "net_faults_set_body",
    "open_connection",
    "range_assign",
    "read_header",
    "rules_from_body",
    "wall_clock_ms",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
