"""``MetadataLog``: the controller quorum's log ``__cluster_metadata-0`` as the project's own ``Log`` (Kafka's
``KafkaMetadataLog`` over ``UnifiedLog``).

It lives in ``<metadata.log.dir>/__cluster_metadata-0/`` with the same segments, index and
``leader-epoch-checkpoint`` as any partition (so ``isrsim dump-log`` reads it), and is recovered the same
way at start (every batch is checked; a torn tail is cut off). Appends are flushed by the Raft core
before it acknowledges them.
"""

from __future__ import annotations

from pathlib import Path

from protocol.admin_bounds import METADATA_MAX_BATCH_BYTES
from protocol.records import build_simple_batch
from raft.raft_log import UNDEFINED_EPOCH, OffsetAndEpoch
from storage.log import Log, LogConfig

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0


class MetadataLog:
    def __init__(self, log: Log) -> None:
        self.log = log

    @classmethod
    def open(cls, metadata_log_dir: Path, config: LogConfig | None = None) -> MetadataLog:
        directory = metadata_log_dir / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        config = config or LogConfig(max_message_bytes=METADATA_MAX_BATCH_BYTES)
        return cls(Log.open(directory, METADATA_TOPIC, METADATA_PARTITION, config))

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    def last_fetched_epoch(self) -> int:
        latest = self.log.latest_epoch
        return latest if latest is not None else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found, offset = self.log.leader_epoch_cache.end_offset_for(epoch, self.end_offset)
        if found == UNDEFINED_EPOCH:
            return OffsetAndEpoch(self.last_fetched_epoch(), self.end_offset)
        return OffsetAndEpoch(found, offset)

    def append_as_leader(self, values: list[bytes], epoch: int) -> tuple[int, int]:
        info = self.log.append_as_leader(build_simple_batch(values, partition_leader_epoch=epoch), epoch)
        return info.first_offset, info.last_offset

    def append_as_follower(self, records: bytes) -> None:
        self.log.append_as_follower(records)

    def read(self, offset: int, max_bytes: int) -> bytes:
        return self.log.read(offset, max_bytes)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def flush(self) -> None:
        self.log.flush()

    def close(self) -> None:
        self.log.close()


__all__ = ["METADATA_PARTITION", "METADATA_TOPIC", "MetadataLog"]
