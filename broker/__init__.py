"""The broker and the controller (``broker/controller/``): processes that serve the protocol.

This module is the package's front door: what the CLI and the report may use, imported from here
(``from broker import BrokerConfig, run_broker``). Everything else in the package is its inside, free to
move; tests/unit/test_layers.py keeps code outside the package from reaching past this door.

- Running a broker: ``BrokerConfig`` (``BrokerConfig.load(file, overrides)``; ``ConfigError`` when it
  cannot be used), ``run_broker(config)`` (under ``trio.run``; ``LogDirLoadError`` when the data
  directory cannot be used, ``InconsistentBrokerIdError``, one of them, when it belongs to another
  broker).
- Running the controller: ``ControllerConfig``, ``run_controller(config)`` (``StateError`` when its
  metadata file cannot be used).
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
    from broker.config import BrokerConfig, ConfigError
    from broker.controller.config import ControllerConfig
    from broker.controller.controller import run_controller
    from broker.controller.state import StateError
    from broker.journal import read_journal
    from broker.log.checkpoint import CheckpointError, LeaderEpochCheckpointFile, OffsetCheckpointFile
    from broker.log_manager import InconsistentBrokerIdError, LogDirLoadError
    from broker.security.acl import (
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
    from broker.security.credentials import CredentialStore, ScramCredential, write_secret_file
    from broker.security.security_metadata import SCRAM_MECHANISM_TYPES, salted_password
    from broker.server import run_broker
    from broker.slow_steps import slow_step_instruments

# Each exported name and the module that defines it (the imports above say the same to type checkers;
# tests/unit/test_layers.py checks that the two agree).
_EXPORTS: dict[str, str] = {
    "CredentialStore": "broker.security.credentials",
    "ScramCredential": "broker.security.credentials",
    "write_secret_file": "broker.security.credentials",
    "BrokerConfig": "broker.config",
    "ConfigError": "broker.config",
    "ControllerConfig": "broker.controller.config",
    "run_controller": "broker.controller.controller",
    "StateError": "broker.controller.state",
    "read_journal": "broker.journal",
    "CheckpointError": "broker.log.checkpoint",
    "LeaderEpochCheckpointFile": "broker.log.checkpoint",
    "OffsetCheckpointFile": "broker.log.checkpoint",
    "InconsistentBrokerIdError": "broker.log_manager",
    "LogDirLoadError": "broker.log_manager",
    "CLUSTER_NAME": "broker.security.acl",
    "SUPPORTED_OPERATIONS": "broker.security.acl",
    "AccessControlEntry": "broker.security.acl",
    "AclBinding": "broker.security.acl",
    "AclBindingFilter": "broker.security.acl",
    "AclOperation": "broker.security.acl",
    "AclPermissionType": "broker.security.acl",
    "PatternType": "broker.security.acl",
    "ResourcePattern": "broker.security.acl",
    "ResourceType": "broker.security.acl",
    "camel": "broker.security.acl",
    "parse_enum": "broker.security.acl",
    "SCRAM_MECHANISM_TYPES": "broker.security.security_metadata",
    "salted_password": "broker.security.security_metadata",
    "run_broker": "broker.server",
    "slow_step_instruments": "broker.slow_steps",
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
    "ControllerConfig",
    "CredentialStore",
    "InconsistentBrokerIdError",
    "LeaderEpochCheckpointFile",
    "LogDirLoadError",
    "OffsetCheckpointFile",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "ScramCredential",
    "StateError",
    "camel",
    "parse_enum",
    "read_journal",
    "run_broker",
    "run_controller",
    "salted_password",
    "slow_step_instruments",
    "write_secret_file",
]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
