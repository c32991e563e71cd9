"""The broker's data directory (Kafka's ``LogManager``): ``meta.properties``, one ``Log`` per
``<topic>-<partition>`` directory, the three offset checkpoint files (docs/storage.md) and the clean-shutdown
marker.

A clean stop flushes every log, writes the checkpoints, closes the logs and then writes the marker
``.kafka_cleanshutdown`` (Kafka's name). The next start sees it, loads the logs without recovering them,
and deletes it; without it (a crash, kill -9) the segments past each recovery point are recovered.

What the broker cannot start from is refused with a :class:`LogDirLoadError`: one line naming the file,
what is wrong and what to do."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from protocol import environment
from protocol.common import TopicPartition, is_valid_topic_name
from protocol.errors import KafkaStorageError
from protocol.file_names import META_PROPERTIES
from storage.checkpoint import CheckpointError, OffsetCheckpointFile, fsync_directory
from storage.cleaner_manager import CLEANER_OFFSET_CHECKPOINT, COMPACTED_INTERNAL_TOPICS
from storage.log import Log, LogConfig
from storage.log_dir_failure import LogDirFailureChannel

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
# The encoding of the records inside batches, in meta.properties: 2 is Kafka's DefaultRecord (docs/storage.md,
# milestone 3). A directory from before it (no such key, msgpack records) is refused at start.
RECORD_FORMAT_KEY = "isrsim.record.format"
RECORD_FORMAT = "2"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

# What a damaged checkpoint costs if the operator deletes it, for the refusal's message.
_IF_DELETED = {
    HW_CHECKPOINT: "the high watermarks then restart from each log's start and catch up from the leaders",
    RECOVERY_POINT_CHECKPOINT: "every segment is then recovered on the next start",
    LOG_START_CHECKPOINT: "each log then starts at its first segment",
    CLEANER_OFFSET_CHECKPOINT: "the cleaner then cleans each compacted log from its start again",
}

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


class LogDirLoadError(Exception):
    """The broker refuses to start from its data directory. ``str()`` is one line: the file, the problem,
    what to do."""


class InconsistentBrokerIdError(LogDirLoadError):
    pass


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    m = _PARTITION_DIR.match(name)
    if m is None or not is_valid_topic_name(m.group("topic")):
        return None
    return m.group("topic"), int(m.group("partition"))


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        environment.fsync(f.fileno())
    environment.replace(tmp, path)


class LogManager:
    def __init__(
        self, log_dir: Path, broker_id: int, cluster_id: str, config: LogConfig, clock: Callable[[], float]
    ) -> None:
        self.log_dir = log_dir
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.config = config
        self.clock = clock
        self.logs: dict[TopicPartition, Log] = {}
        self.failure_channel = LogDirFailureChannel()
        self.hw_checkpoint = OffsetCheckpointFile(log_dir / HW_CHECKPOINT)
        self.recovery_checkpoint = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT)
        self.log_start_checkpoint = OffsetCheckpointFile(log_dir / LOG_START_CHECKPOINT)
        # The log cleaner's: per compacted partition, the first offset not cleaned (storage.cleaner_manager).
        self.cleaner_checkpoint = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT)
        self.cleaner_offsets: dict[TopicPartition, int] = {}

    # ------------------------------------------------------------------ start-up

    def check_log_dir(self) -> None:
        """Refuses a ``log.dirs`` that exists and is not a directory."""
        if self.log_dir.exists() and not self.log_dir.is_dir():
            raise LogDirLoadError(
                f"log.dirs {self.log_dir} is not a directory; point log.dirs at a directory"
            )

    def check_meta_properties(self) -> None:
        """Writes ``meta.properties`` on first start; refuses a directory that belongs to another broker."""
        self.check_log_dir()
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise LogDirLoadError(
                f"log.dirs {self.log_dir} cannot be created ({e.strerror or e}); "
                "check the path and its permissions"
            ) from None
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            props: dict[str, str] = {}
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise LogDirLoadError(
                    f"{path} cannot be read ({e}); restore it, or delete it if this directory belongs to "
                    f"broker {self.broker_id} (it is then written again)"
                ) from None
            for line in text.splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            stored = props.get("broker.id")
            if stored is not None and stored != str(self.broker_id):
                raise InconsistentBrokerIdError(
                    f"{path} says broker.id={stored} but this broker is configured with broker.id="
                    f"{self.broker_id}; use the right data directory or fix broker.id"
                )
            self._check_record_format(path, props.get(RECORD_FORMAT_KEY), text)
            return
        _write_atomically(path, self._meta_properties_text())

    def _meta_properties_text(self) -> str:
        return (
            f"version=0\nbroker.id={self.broker_id}\ncluster.id={self.cluster_id}\n"
            f"{RECORD_FORMAT_KEY}={RECORD_FORMAT}\n"
        )

    def _check_record_format(self, path: Path, stored: str | None, text: str) -> None:
        """Refuses a directory whose segments hold records in another encoding than this version writes
        (see ``RECORD_FORMAT_KEY``). A directory without the key and without any record is adopted."""
        if stored == RECORD_FORMAT:
            return
        if stored is not None:
            raise LogDirLoadError(
                f"{path} says {RECORD_FORMAT_KEY}={stored}, a record encoding this isrsim does not know "
                f"(it writes {RECORD_FORMAT}); use a matching isrsim, or delete {self.log_dir} to start "
                "afresh"
            )
        if any(p.stat().st_size for p in self.log_dir.glob("*-*/*.log")):
            raise LogDirLoadError(
                f"{self.log_dir} was written by an older isrsim whose batches hold msgpack records, which "
                f"this version cannot read ({path} has no {RECORD_FORMAT_KEY}={RECORD_FORMAT}); delete the "
                "directory (for a `cluster up` cluster: isrsim cluster down, remove its root, and start a "
                "new one) to start afresh"
            )
        _write_atomically(path, text.rstrip("\n") + f"\n{RECORD_FORMAT_KEY}={RECORD_FORMAT}\n")

    def load_logs(self) -> None:
        """Opens every partition directory, recovering segments past the recovery point unless the last
        stop was clean (see the module's docstring). Raises :class:`LogDirLoadError` for what it cannot
        start from."""
        marker = self.log_dir / CLEAN_SHUTDOWN_FILE
        had_clean_shutdown = marker.exists()
        recovery = self._read_checkpoint(self.recovery_checkpoint)
        starts = self._read_checkpoint(self.log_start_checkpoint)
        hws = self._read_checkpoint(self.hw_checkpoint)
        self.cleaner_offsets = self._read_checkpoint(self.cleaner_checkpoint)
        log.info(
            "loading logs from %s: %s",
            self.log_dir,
            "clean-shutdown marker found, no recovery"
            if had_clean_shutdown
            else "no clean-shutdown marker, segments past the recovery points are recovered",
        )
        for entry in sorted(self.log_dir.iterdir()):
            if not entry.is_dir():
                continue
            if entry.name.endswith(".delete"):
                shutil.rmtree(entry, ignore_errors=True)
                continue
            tp = parse_partition_dir(entry.name)
            if tp is None:
                if entry.name != "security":  # the node's credentials (docs/security.md)
                    log.warning("ignoring %s: not a <topic>-<partition> directory", entry)
                continue
            try:
                opened = Log.open(
                    entry,
                    tp[0],
                    tp[1],
                    self.config,
                    log_start_offset=starts.get(tp, 0),
                    recovery_point=recovery.get(tp, 0),
                    clock=self.clock,
                    had_clean_shutdown=had_clean_shutdown,
                    failure_channel=self.failure_channel,
                    allow_gaps=tp in self.cleaner_offsets or tp[0] in COMPACTED_INTERNAL_TOPICS,
                )
            except CheckpointError as e:
                raise LogDirLoadError(
                    f"{e}; repair it, or delete it (leader epochs then come only from recovered batches)"
                ) from None
            except OSError as e:
                raise LogDirLoadError(
                    f"{entry}: cannot load partition {tp[0]}-{tp[1]} ({e.strerror or e}: "
                    f"{e.filename or entry}); fix the file's permissions or the disk, or move the "
                    "directory away to let the replica fetch the partition again"
                ) from None
            self.logs[tp] = opened
            hw = hws.get(tp)
            if hw is not None and opened.log_end_offset < hw:
                log.error(
                    "%s-%d: recovery left the log end offset at %d, BELOW the high watermark %d checkpointed "
                    "in %s: %d committed offsets are missing on this replica. As a follower it fetches them "
                    "again from the leader; if it is elected leader before that, they are lost",
                    tp[0],
                    tp[1],
                    opened.log_end_offset,
                    hw,
                    HW_CHECKPOINT,
                    hw - opened.log_end_offset,
                )
            log.info(
                "loaded log %s-%d: log start %d, LEO %d",
                tp[0],
                tp[1],
                opened.log_start_offset,
                opened.log_end_offset,
            )
        if had_clean_shutdown:
            # From now on a crash must lead to recovery.
            try:
                marker.unlink()
            except OSError as e:
                raise LogDirLoadError(
                    f"{marker} cannot be removed ({e.strerror or e}); the log dir must be writable"
                ) from None
            fsync_directory(self.log_dir)

    def _read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        self.check_log_dir()
        try:
            return checkpoint.read()
        except CheckpointError as e:
            raise LogDirLoadError(
                f"{e}; repair it, or delete it ({_IF_DELETED.get(checkpoint.path.name, 'it is rebuilt')})"
            ) from None
        except OSError as e:
            raise LogDirLoadError(
                f"{checkpoint.path} cannot be read ({e.strerror or e}); fix its permissions or the disk"
            ) from None

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return self._read_checkpoint(self.hw_checkpoint)

    # ------------------------------------------------------------------ logs

    @property
    def offline(self) -> bool:
        """Whether the log directory failed (see ``log_dir_failure``)."""
        return self.failure_channel.has_offline_log_dir(str(self.log_dir))

    def get_or_create_log(self, tp: TopicPartition) -> Log:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        with self.failure_channel.guard(str(self.log_dir), f"creating the log of {tp[0]}-{tp[1]}"):
            created = Log.open(
                self.log_dir / partition_dir_name(tp),
                tp[0],
                tp[1],
                self.config,
                clock=self.clock,
                failure_channel=self.failure_channel,
                allow_gaps=tp[0] in COMPACTED_INTERNAL_TOPICS,
            )
        self.logs[tp] = created
        return created

    def delete_log(self, tp: TopicPartition) -> None:
        removed = self.logs.pop(tp, None)
        if removed is not None:
            removed.close()
        target = self.log_dir / partition_dir_name(tp)
        if target.exists():
            # Rename first so a crash mid-delete leaves a directory that start-up removes, not a broken log.
            doomed = target.with_name(target.name + ".delete")
            environment.replace(target, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    # ------------------------------------------------------------------ retention

    def cleanup_logs(
        self, high_watermark: Callable[[TopicPartition], int | None]
    ) -> dict[TopicPartition, int]:
        """Kafka's ``LogManager.cleanupLogs``, one pass of ``log.retention.check.interval.ms``: every log
        deletes its old segments (``Log.delete_old_segments``) below its partition's high watermark
        (``high_watermark``; None: the partition is not hosted, its log is left alone). Returns each log whose
        start moved, with its new log start offset; then ``log-start-offset-checkpoint`` is written."""
        moved: dict[TopicPartition, int] = {}
        if self.offline:
            return moved
        for tp, lg in list(self.logs.items()):
            hw = high_watermark(tp)
            if hw is None:
                continue
            try:
                if lg.delete_old_segments(hw):
                    moved[tp] = lg.log_start_offset
            except KafkaStorageError:
                return moved  # the directory went offline: the failure channel has logged it
        if moved:
            self.checkpoint_log_start_offsets()
        return moved

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_high_watermarks(self, hws: dict[TopicPartition, int]) -> None:
        self._checkpoint("writing " + HW_CHECKPOINT, lambda: self.hw_checkpoint.write(hws))

    def checkpoint_log_start_offsets(self) -> None:
        self._checkpoint(
            "writing " + LOG_START_CHECKPOINT,
            lambda: self.log_start_checkpoint.write(
                {tp: lg.log_start_offset for tp, lg in self.logs.items()}
            ),
        )

    def checkpoint_cleaner_offsets(self) -> None:
        """Write ``cleaner-offset-checkpoint`` for the hosted logs the cleaner knows."""
        self._checkpoint(
            "writing " + CLEANER_OFFSET_CHECKPOINT,
            lambda: self.cleaner_checkpoint.write(
                {tp: off for tp, off in self.cleaner_offsets.items() if tp in self.logs}
            ),
        )

    def flush_and_checkpoint_stepwise(self) -> Iterator[None]:
        """``checkpoint_recovery_points(flush=True)`` a log at a time: yields after each log flushed, so that
        the caller can serve other work between two (a flush is an fsync, 10 to 300 ms on a busy disk; a
        broker hosts the internal topics' hundred partitions). A log deleted meanwhile is skipped."""
        for tp, lg in list(self.logs.items()):
            if self.offline:
                return
            if self.logs.get(tp) is not lg:
                continue
            self._checkpoint("flushing the log of " + f"{tp[0]}-{tp[1]}", lg.flush)
            yield
        self.checkpoint_recovery_points(flush=False)

    def checkpoint_recovery_points(self, flush: bool) -> None:
        def write() -> None:
            if flush:
                for lg in self.logs.values():
                    lg.flush()
            self.recovery_checkpoint.write({tp: lg.recovery_point for tp, lg in self.logs.items()})

        self._checkpoint("writing " + RECOVERY_POINT_CHECKPOINT, write)

    def _snapshot_producer_state(self) -> None:
        """Producer state at each log end, so the next start replays nothing (Kafka's ``Log.close``)."""
        for lg in self.logs.values():
            lg.take_producer_snapshot()

    def _checkpoint(self, what: str, write: Callable[[], None]) -> None:
        """A periodic write: skipped once the directory is offline; a failure takes it offline (logged
        once by the failure channel, not at every period)."""
        try:
            with self.failure_channel.guard(str(self.log_dir), what):
                write()
        except KafkaStorageError:
            pass

    def shutdown(self, hws: dict[TopicPartition, int]) -> None:
        """Clean stop: flush every log, write all three checkpoints, close the logs, and only then write
        the clean-shutdown marker (so that a stop interrupted earlier is recovered as a crash). An offline
        directory gets none of it: the next start recovers it."""
        if not self.offline:
            self.checkpoint_recovery_points(flush=True)
            self.checkpoint_log_start_offsets()
            self.checkpoint_high_watermarks(hws)
            self._checkpoint("writing producer snapshots", self._snapshot_producer_state)
        for lg in self.logs.values():
            lg.close()
        if self.offline:
            log.warning(
                "log dir %s is offline: no checkpoints and no clean-shutdown marker written; the next start "
                "recovers its logs",
                self.log_dir,
            )
            return
        try:
            with self.failure_channel.guard(str(self.log_dir), "writing " + CLEAN_SHUTDOWN_FILE):
                with open(self.log_dir / CLEAN_SHUTDOWN_FILE, "wb") as f:
                    environment.fsync(f.fileno())
                fsync_directory(self.log_dir)
        except KafkaStorageError:
            pass
