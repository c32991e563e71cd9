"""What every scenario gets: the run's parameters (``--quick`` or full), a directory under the run's
temporary root, the ceilings measured so far, and a way to say what it is doing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


class Skip(Exception):
    """A scenario cannot run here; the message says why (it is reported, never turned into numbers)."""


@dataclass(frozen=True)
class Params:
    """Sizes of each scenario. The quick run keeps every scenario but does less of it."""

    quick: bool
    ceiling_tcp_bytes: int
    ceiling_file_bytes: int
    # (2a) 100-byte records.
    small_records: int
    small_batch_records: int
    small_partitions: int
    # (2a) again with 16 KB batches (Kafka's default batch.size): records to send.
    kafka_batch_records: int
    # (2c) 100-byte records over more partitions: the partition counts and the records to send for each.
    scaling_partition_counts: tuple[int, ...]
    scaling_records: int
    # (2b) 1 MiB batches.
    large_batches: int
    large_partitions: int
    # (3) commit latency at a fixed rate.
    latency_rate: int
    latency_seconds: float
    latency_batch_records: int
    # (4) failover.
    failover_partition_counts: tuple[int, ...]
    failover_repeats: int
    # (5) catch-up.
    catchup_bytes: int
    catchup_partitions: int
    # (5b) catch-up of many lagging partitions.
    catchup_many_bytes: int
    catchup_many_partitions: int
    # (6) fetch sessions.
    idle_partitions: int
    idle_window_s: float
    # (9) librdkafka next to the msgpack producer: records per run, rounds, the rate both send at.
    kafka_client_records: int = 50_000
    kafka_client_rounds: int = 3
    kafka_client_rate: int = 30_000
    # (2) profile with py-spy while it runs.
    profile: bool = False
    # (7) also on a cluster of its own holding about this many MB of segments (0: not).
    report_mb: int = 0
    # (7) records written for the report when no other scenario left data behind.
    report_fill_records: int = 300_000
    # The smoke run (``--smoke``): the smallest sizes, to check that every scenario runs.
    smoke: bool = False

    @classmethod
    def smallest(cls, *, profile: bool = False) -> Params:
        """``--smoke``: every scenario in seconds, to see that it runs and writes its figures (which mean
        little at these sizes)."""
        return cls(
            quick=True,
            ceiling_tcp_bytes=16 << 20,
            ceiling_file_bytes=16 << 20,
            small_records=20_000,
            small_batch_records=1000,
            kafka_batch_records=20_000,
            small_partitions=3,
            scaling_partition_counts=(3, 6),
            scaling_records=6_000,
            large_batches=6,
            large_partitions=3,
            latency_rate=2_000,
            latency_seconds=1.0,
            latency_batch_records=100,
            failover_partition_counts=(1,),
            failover_repeats=1,
            catchup_bytes=4_000_000,
            catchup_partitions=2,
            catchup_many_bytes=2_000_000,
            catchup_many_partitions=6,
            idle_partitions=30,
            idle_window_s=1.0,
            kafka_client_records=5_000,
            kafka_client_rounds=1,
            profile=profile,
            report_fill_records=3_000,
            smoke=True,
        )

    @classmethod
    def for_mode(cls, quick: bool, *, profile: bool = False) -> Params:
        if quick:
            return cls(
                quick=True,
                ceiling_tcp_bytes=256 << 20,
                ceiling_file_bytes=256 << 20,
                small_records=1_000_000,
                small_batch_records=1000,
                kafka_batch_records=200_000,
                small_partitions=3,
                scaling_partition_counts=(30, 300),
                scaling_records=300_000,
                large_batches=200,
                large_partitions=3,
                latency_rate=20_000,
                latency_seconds=5.0,
                latency_batch_records=100,
                failover_partition_counts=(1, 100),
                failover_repeats=1,
                catchup_bytes=100_000_000,
                catchup_partitions=4,
                catchup_many_bytes=30_000_000,
                catchup_many_partitions=100,
                idle_partitions=1000,
                idle_window_s=3.0,
                kafka_client_records=30_000,
                kafka_client_rounds=2,
                profile=profile,
            )
        return cls(
            quick=False,
            ceiling_tcp_bytes=1 << 30,
            ceiling_file_bytes=1 << 30,
            small_records=5_000_000,
            small_batch_records=1000,
            kafka_batch_records=1_000_000,
            small_partitions=3,
            scaling_partition_counts=(30, 300),
            scaling_records=2_000_000,
            large_batches=1000,
            large_partitions=3,
            latency_rate=20_000,
            latency_seconds=30.0,
            latency_batch_records=100,
            failover_partition_counts=(1, 100),
            failover_repeats=3,
            catchup_bytes=500_000_000,
            catchup_partitions=4,
            catchup_many_bytes=200_000_000,
            catchup_many_partitions=100,
            idle_partitions=1000,
            idle_window_s=10.0,
            kafka_client_records=300_000,
            kafka_client_rounds=3,
            profile=profile,
        )


@dataclass
class BenchContext:
    root: Path
    params: Params
    on_step: Callable[[str], None] = lambda text: None
    on_note: Callable[[str], None] = lambda text: None
    loopback_mb_s: float | None = None
    read_mb_s: float | None = None
    # Cluster roots that scenarios left behind (name -> root), for the report job.
    data_roots: dict[str, Path] = field(default_factory=dict)
    # Where profiles are written (``--out``).
    out_dir: Path | None = None

    def step(self, text: str) -> None:
        self.on_step(text)

    def note(self, text: str) -> None:
        self.on_note(text)

    def scenario_dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def of_loopback(self, mb_s: float) -> float | None:
        return mb_s / self.loopback_mb_s if self.loopback_mb_s else None

    def of_read(self, mb_s: float) -> float | None:
        return mb_s / self.read_mb_s if self.read_mb_s else None
