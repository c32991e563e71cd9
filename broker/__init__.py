"""The broker: the process that serves clients and replicates partitions.

This module is the package's front door: what the CLI and the report may use, imported from here
(``from broker import BrokerConfig, run_broker``). Everything else in the package is its inside, free to
move; tests/unit/test_layers.py keeps code outside the package from reaching past this door.

- Running a broker: ``BrokerConfig`` (``BrokerConfig.load(file, overrides)``; ``ConfigError`` when it
  cannot be used), ``run_broker(config)`` (under ``trio.run``; ``LogDirLoadError`` when the data
  directory cannot be used, ``InconsistentBrokerIdError``, one of them, when it belongs to another
  broker).
- Security metadata for the ``acl`` and ``user`` commands: Kafka's ACL types (``AclBinding``,
  ``AclOperation`` ...) and ``salted_password`` (what ALTER_USER_SCRAM_CREDENTIALS carries).
- ``slow_step_instruments()``: for ``trio.run(..., instruments=...)`` of a node, the event-loop stall log
  that ``ISRSIM_SLOW_STEP_MS`` turns on (none otherwise).
- Reading what brokers leave on disk: ``read_journal`` (``events.jsonl``), the Kafka checkpoint files
  ``OffsetCheckpointFile`` and ``LeaderEpochCheckpointFile`` (``CheckpointError``).

The names load on first use, so ``import broker`` costs nothing, and reading a journal does not load the
server (trio, the log, the fetchers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_exports

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.server import KafkaServer, run_broker
    from server.config import ConfigError
    from server.journal import read_journal
    from server.security.acl import (
        CLUSTER_NAME,
        SUPPORTED_OPERATIONS,
        AccessControlEntry,
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourcePattern,
        ResourceType,
        camel,
        parse_enum,
    )
    from server.security.credentials import CredentialStore, ScramCredential, write_secret_file
    from server.security.security_metadata import SCRAM_MECHANISM_TYPES, salted_password
    from server.slow_steps import slow_step_instruments
    from storage.checkpoint import CheckpointError, LeaderEpochCheckpointFile, OffsetCheckpointFile
    from storage.log_manager import InconsistentBrokerIdError, LogDirLoadError

# Each exported name and the module that defines it (the imports above say the same to type checkers;
# tests/unit/test_layers.py checks that the two agree).
_EXPORTS: dict[str, str] = {
    "CredentialStore": "server.security.credentials",
    "ScramCredential": "server.security.credentials",
    "write_secret_file": "server.security.credentials",
    "BrokerConfig": "broker.config",
    "ConfigError": "server.config",
    "read_journal": "server.journal",
    "CheckpointError": "storage.checkpoint",
    "LeaderEpochCheckpointFile": "storage.checkpoint",
    "OffsetCheckpointFile": "storage.checkpoint",
    "InconsistentBrokerIdError": "storage.log_manager",
    "LogDirLoadError": "storage.log_manager",
    "CLUSTER_NAME": "server.security.acl",
    "SUPPORTED_OPERATIONS": "server.security.acl",
    "AccessControlEntry": "server.security.acl",
    "AclBinding": "server.security.acl",
    "AclBindingFilter": "server.security.acl",
    "AclOperation": "server.security.acl",
    "AclPermissionType": "server.security.acl",
    "PatternType": "server.security.acl",
    "ResourcePattern": "server.security.acl",
    "ResourceType": "server.security.acl",
    "camel": "server.security.acl",
    "parse_enum": "server.security.acl",
    "SCRAM_MECHANISM_TYPES": "server.security.security_metadata",
    "salted_password": "server.security.security_metadata",
    "run_broker": "broker.server",
    "KafkaServer": "broker.server",
    "slow_step_instruments": "server.slow_steps",
}

__all__ = [
    "CLUSTER_NAME",
    "SCRAM_MECHANISM_TYPES",
    "SUPPORTED_OPERATIONS",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "BrokerConfig",
    "CheckpointError",
    "ConfigError",
    "CredentialStore",
    "InconsistentBrokerIdError",
    "KafkaServer",
    "LeaderEpochCheckpointFile",
    "LogDirLoadError",
    "OffsetCheckpointFile",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "ScramCredential",
    "camel",
    "parse_enum",
    "read_journal",
    "run_broker",
    "salted_password",
    "slow_step_instruments",
    "write_secret_file",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
