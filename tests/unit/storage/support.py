"""Helpers shared by the log tests."""

from __future__ import annotations

from pathlib import Path

from protocol.records import BatchHeader, build_simple_batch, iter_batches
from storage.log import Log, LogConfig

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=200)


def batch(count: int = 1, size: int = 10, *, tag: int = 0, base_offset: int = 0, epoch: int = -1) -> bytes:
    """A batch of ``count`` records whose values are ``size`` bytes derived from ``tag``."""
    values = [bytes([(tag + i) % 256]) * size for i in range(count)]
    return build_simple_batch(
        values, base_offset=base_offset, partition_leader_epoch=epoch, base_timestamp=1_000
    )


def headers(data: bytes) -> list[BatchHeader]:
    return [h for _, h in iter_batches(data)]


def offsets(data: bytes) -> list[tuple[int, int]]:
    """(base_offset, last_offset) of each batch."""
    return [(h.base_offset, h.last_offset) for h in headers(data)]


def open_log(
    directory: Path, config: LogConfig = SMALL, *, log_start_offset: int = 0, recovery_point: int = 0
) -> Log:
    return Log.open(
        directory, "topic", 0, config, log_start_offset=log_start_offset, recovery_point=recovery_point
    )


def read_all(log: Log) -> bytes:
    """Every byte of the log, segment after segment."""
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 1 << 30)
        assert chunk
        out += chunk
        offset = headers(chunk)[-1].next_offset
    return bytes(out)
