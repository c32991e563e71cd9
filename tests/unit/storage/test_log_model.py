"""Random sequences of log operations compared with an in-memory model of the log."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from protocol.records import assign_offsets_and_epoch, build_simple_batch, iter_batches
from storage.log import Log, LogConfig

CONFIG = LogConfig(segment_bytes=2500, index_interval_bytes=150)


@dataclass(frozen=True)
class ModelBatch:
    base: int
    last: int
    epoch: int
    data: bytes


def make_batch(count: int, size: int, tag: int, base_offset: int = 0, epoch: int = -1) -> bytes:
    values = [bytes([(tag * 7 + i) % 256]) * size for i in range(count)]
    return build_simple_batch(
        values, base_offset=base_offset, partition_leader_epoch=epoch, base_timestamp=tag
    )


batch_specs = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60)), min_size=1, max_size=4)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="logmodel-"))
        self.dir = self.root / "t-0"
        self.log = Log.open(self.dir, "t", 0, CONFIG)
        self.batches: list[ModelBatch] = []
        self.log_start = 0
        self.log_end = 0
        self.epoch = 0
        self.tag = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize(start=st.sampled_from([0, 0, 7, 1000]))
    def start_at(self, start: int) -> None:
        if start:
            self.log.truncate_fully_and_start_at(start)
            self.log_start = self.log_end = start

    def _encode(self, specs: list[tuple[int, int]], epoch: int, base: int) -> list[bytes]:
        out = []
        for count, size in specs:
            self.tag += 1
            out.append(make_batch(count, size, self.tag, base_offset=base, epoch=epoch))
            base += count
        return out

    def _record(self, stored: bytes) -> None:
        for pos, h in iter_batches(stored):
            self.batches.append(
                ModelBatch(h.base_offset, h.last_offset, h.partition_leader_epoch, stored[pos : pos + h.size])
            )

    @rule(specs=batch_specs, bump=st.booleans())
    def append_as_leader(self, specs: list[tuple[int, int]], bump: bool) -> None:
        self.epoch += int(bump)
        raw = b"".join(self._encode(specs, epoch=-1, base=0))
        expected = bytearray(raw)
        self.log_end = assign_offsets_and_epoch(expected, self.log_end, self.epoch)
        first_offset = self.log.log_end_offset
        info = self.log.append_as_leader(raw, self.epoch)
        self._record(bytes(expected))
        assert (info.first_offset, info.last_offset) == (first_offset, self.log_end - 1)

    @rule(specs=batch_specs, bump=st.booleans())
    def append_as_follower(self, specs: list[tuple[int, int]], bump: bool) -> None:
        self.epoch += int(bump)
        data = b"".join(self._encode(specs, epoch=self.epoch, base=self.log_end))
        self.log.append_as_follower(data)
        self._record(data)
        self.log_end = self.batches[-1].last + 1

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.log_end + 2), label="target")
        first_base = self.log.segments[0].base_offset
        changed = self.log.truncate_to(target)
        assert changed == (target < self.log_end)
        if not changed:
            return
        if target < first_base:
            self.batches = []
            self.log_start = self.log_end = target
            return
        self.batches = [b for b in self.batches if b.last < target]
        self.log_end = self.batches[-1].last + 1 if self.batches else first_base
        self.log_start = min(self.log_start, self.log_end)

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data())
    def increment_log_start(self, data: st.DataObject) -> None:
        new_start = data.draw(st.integers(self.log_start, self.log_end), label="new_start")
        assert self.log.maybe_increment_log_start_offset(new_start) == (new_start > self.log_start)
        self.log_start = max(self.log_start, new_start)

    @rule(flush=st.booleans(), torn=st.sampled_from([b"", b"\x00", b"\x00\x00\x00\x10garbage", b"\xff" * 70]))
    def reopen(self, flush: bool, torn: bytes) -> None:
        if flush:
            self.log.flush()
        recovery_point = self.log.recovery_point
        self.log.close()
        if torn:
            last = sorted(self.dir.glob("*.log"))[-1]
            with open(last, "ab") as f:
                f.write(torn)
            recovery_point = min(recovery_point, int(last.name[:20]))
        self.log = Log.open(
            self.dir, "t", 0, CONFIG, log_start_offset=self.log_start, recovery_point=recovery_point
        )

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(self.log_start, self.log_end), label="start")
        max_bytes = data.draw(st.integers(0, 2000), label="max_bytes")
        max_offset = data.draw(st.none() | st.integers(self.log_start, self.log_end + 1), label="max_offset")
        min_one = data.draw(st.booleans(), label="min_one")
        got = self.log.read(start, max_bytes, max_offset=max_offset, min_one_message=min_one)
        # What a log made of one endless segment would return:
        wanted = b""
        for b in [] if max_offset is not None and start >= max_offset else self.batches:
            if b.last < start:
                continue
            if max_offset is not None and b.base >= max_offset:
                break
            if len(wanted) + len(b.data) > max_bytes and (wanted or not min_one):
                break
            wanted += b.data
        assert wanted.startswith(got)
        if got != wanted:
            # A read stops at the end of a segment: the next batch starts a segment.
            assert got, "a read returned nothing although a batch was due"
            next_offset = list(iter_batches(got))[-1][1].next_offset
            assert next_offset in {s.base_offset for s in self.log.segments}

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == self.log_end
        assert self.log.log_start_offset == self.log_start

    @invariant()
    def contents_match(self) -> None:
        expected = b"".join(b.data for b in self.batches if b.last >= self.log_start)
        got = b"".join(
            self.log.read(s.base_offset if i else self.log_start, 1 << 30)
            for i, s in enumerate(self.log.segments)
            if s.size and s.next_offset > self.log_start
        )
        assert got == expected

    @invariant()
    def epoch_cache_matches_data(self) -> None:
        entries = self.log.leader_epoch_cache.entries()
        for a, b in itertools.pairwise(entries):
            assert a.epoch < b.epoch and a.start_offset < b.start_offset
        if entries:
            assert entries[0].start_offset >= self.log_start
            assert entries[-1].start_offset <= self.log_end
        cache = self.log.leader_epoch_cache
        for mb in self.batches:
            if mb.last >= self.log_start:
                assert cache.epoch_for_offset(max(mb.base, self.log_start)) == mb.epoch
                assert cache.epoch_for_offset(mb.last) == mb.epoch


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOG_MODEL_EXAMPLES", "60")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogModel = LogMachine.TestCase
