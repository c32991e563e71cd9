"""Types and helpers every layer shares (the bottom layer, like Kafka's ``org.apache.kafka.common``):
``TopicPartition``, a broker's endpoint, clocks, topic-name validation and error names.

Everything above imports these from here; nothing here imports from ``broker``, ``fetcher`` or ``cli``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from protocol.errors import Errors

# Kafka's TopicPartition: (topic, partition). A plain tuple so it hashes fast and packs as a msgpack array.
TopicPartition = tuple[str, int]

# A clock: milliseconds, read by calling it. Production code takes one as ``clock_ms`` (default
# ``wall_clock_ms``); tests pass a ``MockTime``.
Clock = Callable[[], int]


# The clocks of the process's environment (protocol.environment installs the simulation's here): bound
# once, so a real process pays what it always did.
_wall_time: Callable[[], float] = time.time
_monotonic: Callable[[], float] = time.monotonic


def use_clocks(wall_time: Callable[[], float], monotonic: Callable[[], float]) -> None:
    """Called by ``protocol.environment.install`` only."""
    global _wall_time, _monotonic
    _wall_time, _monotonic = wall_time, monotonic


def wall_clock_ms() -> int:
    """Wall-clock milliseconds (Kafka's ``Time.SYSTEM.milliseconds()``): what journals and timeouts use
    (the environment's: virtual milliseconds from 0 in the simulation, ``protocol.environment``)."""
    return int(_wall_time() * 1000)


def wall_time() -> float:
    """Wall-clock seconds (``time.time()``, or the simulation's virtual seconds)."""
    return _wall_time()


def monotonic_ms() -> int:
    """Milliseconds from a clock that never goes back (for deadlines within one process)."""
    return int(_monotonic() * 1000)


class MockTime:
    """A manual clock (Kafka's ``MockTime``): ``now_ms`` moves only when a test calls ``sleep``."""

    __slots__ = ("now_ms",)

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def sleep(self, ms: int) -> None:
        self.now_ms += ms

    def __repr__(self) -> str:
        return f"MockTime(now_ms={self.now_ms})"


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where a broker listens (Kafka's ``Node`` / ``BrokerEndPoint``)."""

    broker_id: int
    host: str
    port: int


# The leader id of a partition whose topic is being deleted (Kafka's ``LeaderAndIsr.LeaderDuringDelete``).
LEADER_DURING_DELETE = -2

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> str | None:
    """Kafka's ``Topic.validate``: None if ``name`` is a legal topic name, else why not."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_' and '-'"
    return None


def is_valid_topic_name(name: str) -> bool:
    return validate_topic_name(name) is None


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NOT_LEADER_OR_FOLLOWER``), or the number if it has none."""
    try:
        return Errors(code).name
    except ValueError:
        return str(code)
