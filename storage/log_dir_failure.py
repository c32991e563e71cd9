"""Kafka's ``LogDirFailureChannel``: where an I/O error on a log directory is reported once, and the
directory is marked offline for good (until the broker restarts).

Anything that writes or reads a log directory runs under :meth:`LogDirFailureChannel.guard` (the ``Log``
methods, the checkpoint writes). An ``OSError`` there (ENOSPC, EIO, EROFS ...; not EMFILE/ENFILE, see
``TRANSIENT_ERRNOS``) marks the directory offline,
is logged once as one ERROR line, and becomes :class:`~protocol.errors.KafkaStorageError`
(KAFKA_STORAGE_ERROR, 56), which requests answer per partition. From then on every guarded operation on
that directory fails at once with the same error, without touching the disk. Listeners (the broker's
``ReplicaManager.handle_log_dir_failure`` through a trio task) stop the partitions' fetchers and tell the
controller.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from protocol.errors import KafkaStorageError

logger = logging.getLogger(__name__)

R = TypeVar("R")

# Out of file descriptors: the process's limit, not the disk. The operation fails (KAFKA_STORAGE_ERROR, which
# clients retry) but the directory stays online, so a flood of connections cannot take the logs offline
# until a restart. (Kafka marks the directory offline for any IOException, "Too many open files" included.)
TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class LogDirFailureChannel:
    def __init__(self) -> None:
        self._offline: dict[str, str] = {}
        self._listeners: list[Callable[[str], None]] = []
        self.transient_failures = 0  # since the last guarded operation that worked

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(log_dir)`` is called once when a directory goes offline; it must not block."""
        self._listeners.append(listener)

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    @property
    def offline_log_dirs(self) -> list[str]:
        return sorted(self._offline)

    def maybe_add_offline_log_dir(self, log_dir: str, message: str) -> None:
        """Marks ``log_dir`` offline (the first report wins; later ones are not logged again)."""
        if log_dir in self._offline:
            return
        self._offline[log_dir] = message
        logger.error(
            "log dir %s is offline: %s. Its partitions answer KAFKA_STORAGE_ERROR until the broker is "
            "restarted; free space or fix the disk first (the next start recovers the logs)",
            log_dir,
            message,
        )
        for listener in self._listeners:
            listener(log_dir)

    def run(self, log_dir: str, what: Callable[[], str], fn: Callable[[], R]) -> R:
        """``guard`` as a call, for the hot paths (every log read and append): ``what`` is only built when
        something failed, and no generator-based context manager is entered."""
        if log_dir in self._offline or self.transient_failures:
            with self.guard(log_dir, what()):
                return fn()
        try:
            return fn()
        except OSError as e:
            error = e
        # The failure goes through guard's handling: re-raised inside it, it comes out as KafkaStorageError.
        with self.guard(log_dir, what()):
            raise error

    @contextmanager
    def guard(self, log_dir: str, what: str) -> Iterator[None]:
        """Run a disk operation on ``log_dir``: refused at once if the directory is offline; an
        ``OSError`` marks it offline. Both raise KafkaStorageError."""
        if log_dir in self._offline:
            raise KafkaStorageError(f"{what}: log dir {log_dir} is offline ({self._offline[log_dir]})")
        try:
            yield
        except OSError as e:
            message = f"error while {what}: {e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
            if e.errno in TRANSIENT_ERRNOS:
                if not self.transient_failures:
                    logger.warning(
                        "%s; the log dir stays online, the operation is refused until it works", message
                    )
                self.transient_failures += 1
                raise KafkaStorageError(message) from e
            self.maybe_add_offline_log_dir(log_dir, message)
            raise KafkaStorageError(message) from e
        if self.transient_failures:
            logger.warning(
                "log dir %s usable again after %d refused operations", log_dir, self.transient_failures
            )
            self.transient_failures = 0
