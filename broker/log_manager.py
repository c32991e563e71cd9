"""The broker's data directory (Kafka's ``LogManager``): ``meta.properties``, one ``Log`` per
``<topic>-<partition>`` directory, and the three offset checkpoint files (SPEC §4)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from broker.log.checkpoint import OffsetCheckpointFile
from broker.log.log import Log, LogConfig
from protocol.common import TopicPartition, is_valid_topic_name

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
META_PROPERTIES = "meta.properties"

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


class InconsistentBrokerIdError(Exception):
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
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
        self.hw_checkpoint = OffsetCheckpointFile(log_dir / HW_CHECKPOINT)
        self.recovery_checkpoint = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT)
        self.log_start_checkpoint = OffsetCheckpointFile(log_dir / LOG_START_CHECKPOINT)

    # ------------------------------------------------------------------ start-up

    def check_meta_properties(self) -> None:
        """Writes ``meta.properties`` on first start; refuses a directory that belongs to another broker."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            props: dict[str, str] = {}
            for line in path.read_text(encoding="utf-8").splitlines():
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
            stored = props.get("broker.id")
            if stored is not None and stored != str(self.broker_id):
                raise InconsistentBrokerIdError(
                    f"{path} says broker.id={stored} but this broker is configured with broker.id="
                    f"{self.broker_id}; use the right data directory or fix broker.id"
                )
            return
        _write_atomically(path, f"version=0\nbroker.id={self.broker_id}\ncluster.id={self.cluster_id}\n")

    def load_logs(self) -> None:
        """Opens every partition directory, recovering segments past the recovery point."""
        recovery = self.recovery_checkpoint.read()
        starts = self.log_start_checkpoint.read()
        for entry in sorted(self.log_dir.iterdir()):
            if not entry.is_dir():
                continue
            if entry.name.endswith(".delete"):
                shutil.rmtree(entry, ignore_errors=True)
                continue
            tp = parse_partition_dir(entry.name)
            if tp is None:
                log.warning("ignoring %s: not a <topic>-<partition> directory", entry)
                continue
            self.logs[tp] = Log.open(
                entry,
                tp[0],
                tp[1],
                self.config,
                log_start_offset=starts.get(tp, 0),
                recovery_point=recovery.get(tp, 0),
                clock=self.clock,
            )
            log.info(
                "loaded log %s-%d: log start %d, LEO %d",
                tp[0],
                tp[1],
                self.logs[tp].log_start_offset,
                self.logs[tp].log_end_offset,
            )

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return self.hw_checkpoint.read()

    # ------------------------------------------------------------------ logs

    def get_or_create_log(self, tp: TopicPartition) -> Log:
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        created = Log.open(self.log_dir / partition_dir_name(tp), tp[0], tp[1], self.config, clock=self.clock)
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
            os.replace(target, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_high_watermarks(self, hws: dict[TopicPartition, int]) -> None:
        self.hw_checkpoint.write(hws)

    def checkpoint_log_start_offsets(self) -> None:
        self.log_start_checkpoint.write({tp: lg.log_start_offset for tp, lg in self.logs.items()})

    def checkpoint_recovery_points(self, flush: bool) -> None:
        if flush:
            for lg in self.logs.values():
                lg.flush()
        self.recovery_checkpoint.write({tp: lg.recovery_point for tp, lg in self.logs.items()})

    def shutdown(self, hws: dict[TopicPartition, int]) -> None:
        """Clean stop: flush every log, then write all three checkpoints."""
        self.checkpoint_recovery_points(flush=True)
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks(hws)
        for lg in self.logs.values():
            lg.close()
