"""The controller: its own process role (``isrsim controller start``), a voter of the KRaft quorum.

A synchronous core decides (``core``, ``elections``, ``state``, ``topics``); a trio shell (``controller``,
``quorum``, ``channel_manager``) listens, persists and sends the requests it batches (``request_batch``).

This module is the package's front door, what the CLI and the kit may use (``from controller import
ControllerConfig, run_controller``): ``ControllerConfig`` (``ControllerConfig.load(file, overrides)``),
``run_controller(config)`` (under ``trio.run``; ``StateError`` when its metadata cannot be used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from protocol.lazy import lazy_exports

if TYPE_CHECKING:
    from controller.config import ControllerConfig
    from controller.controller import KafkaController, run_controller
    from controller.state import StateError

_EXPORTS: dict[str, str] = {
    "ControllerConfig": "controller.config",
    "run_controller": "controller.controller",
    "KafkaController": "controller.controller",
    "StateError": "controller.state",
}

__all__ = ["ControllerConfig", "KafkaController", "StateError", "run_controller"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
