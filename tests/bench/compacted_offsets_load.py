"""How long a group coordinator's load of a ``__consumer_offsets`` partition takes after N offset commits,
uncompacted and after the log cleaner (docs/performance.md, "Coordinator load of a compacted
__consumer_offsets").

    .venv/bin/python tests/bench/compacted_offsets_load.py 100000 1000000

For each N: a ``__consumer_offsets-0`` log (Kafka's 100 MiB segments, scaled by --segment-bytes) gets N
commits, one batch each as a consumer's OffsetCommit of one partition writes it, spread over --keys keys
(group, topic, partition); the active segment is rolled (as it is once it fills); the load the
coordinator runs when it takes the partition over (``Log.read`` of offsets.load.buffer.size chunks folded
by ``GroupLoader``, as ``GroupCoordinator._load``) is timed before and after cleaner passes until the
checkpoint reaches the log end. A benchmark, not a test: it prints one line per N.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from coordinator.group.group_metadata import OffsetAndMetadata
from coordinator.group.offsets_log import GroupLoader, offset_commit_batch
from protocol.records import iter_batches
from storage.cleaner_manager import clean_log_now
from storage.log import Log, LogConfig
from storage.producer_state import AppendOrigin

LOAD_BUFFER = 5 * 1024 * 1024  # offsets.load.buffer.size


def build(directory: Path, commits: int, keys: int, segment_bytes: int) -> Log:
    log = Log.open(
        directory / "__consumer_offsets-0",
        "__consumer_offsets",
        0,
        LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact"),
    )
    groups = max(keys // 100, 1)
    per_group = max(keys // groups, 1)
    ts = int(time.time() * 1000)
    chunk: list[bytes] = []
    for i in range(commits):
        key = i % keys
        group, partition = f"group-{key // per_group}", key % per_group
        chunk.append(offset_commit_batch(group, {("orders", partition): OffsetAndMetadata(offset=i)}, ts))
        if len(chunk) == 500:
            log.append_as_leader(b"".join(chunk), 0, AppendOrigin.COORDINATOR)
            chunk = []
    if chunk:
        log.append_as_leader(b"".join(chunk), 0, AppendOrigin.COORDINATOR)
    log.roll()
    return log


def load(log: Log) -> tuple[float, int, int]:
    """Seconds, records read, offsets loaded: the coordinator's replay of the whole partition."""
    started = time.perf_counter()
    loader = GroupLoader()
    offset, end = log.log_start_offset, log.log_end_offset
    while offset < end:
        data = log.read(offset, LOAD_BUFFER, max_offset=end)
        if not data:
            break
        loader.add_batches(data)
        offset = [h for _, h in iter_batches(data, validate=False)][-1].next_offset
    loaded = loader.result()
    took = time.perf_counter() - started
    return took, loader.records, sum(len(g.offsets) for g in loaded.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commits", type=int, nargs="+")
    parser.add_argument("--keys", type=int, default=1000, help="distinct (group, topic, partition) keys")
    parser.add_argument("--segment-bytes", type=int, default=104857600)
    args = parser.parse_args()
    for n in args.commits:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            log = build(Path(tmp), n, args.keys, args.segment_bytes)
            built = time.perf_counter() - t0
            size_before = log.size_in_bytes
            before, records_before, offsets_before = load(log)
            t1 = time.perf_counter()
            checkpoint, passes = None, 0
            while checkpoint is None or checkpoint < log.segments[-1].base_offset:
                result = clean_log_now(log, log.log_end_offset, checkpointed=checkpoint)
                if result is None:
                    break
                checkpoint, passes = result.end_offset, passes + 1
            cleaned_s = time.perf_counter() - t1
            after, records_after, offsets_after = load(log)
            assert offsets_after == offsets_before, (offsets_before, offsets_after)
            size_after = log.size_in_bytes
            print(
                f"{n:>9,} commits, {args.keys} keys: "
                f"log {size_before / 1e6:.1f} MB -> {size_after / 1e6:.2f} MB; "
                f"load {before * 1000:,.0f} ms ({records_before:,} records) -> {after * 1000:,.1f} ms "
                f"({records_after:,} records); {passes} cleaner pass(es) {cleaned_s:.1f} s; "
                f"built in {built:.1f} s"
            )
            log.close()


if __name__ == "__main__":
    main()
