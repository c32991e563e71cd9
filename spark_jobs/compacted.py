"""Which partitions are compacted and where their cleaned range ends (from each broker's
``cleaner-offset-checkpoint``), for the checks that compare batches: below a compacted partition's cleaned
range replicas differ byte for byte (``spark_jobs.compaction_checks`` judges them per key there)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_jobs.inputs import TP, Inputs

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
_KEY = tuple[str, int]


def _cleaner_offsets(inp: Inputs) -> dict[tuple[int, str, int], int]:
    """(broker, topic, partition) -> the replica's cleaner checkpoint (small files: read when asked)."""
    out: dict[tuple[int, str, int], int] = {}
    for b in inp.layout.brokers:
        path = Path(b.data_dir) / CLEANER_OFFSET_CHECKPOINT
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines[2:]:
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2].lstrip("-").isdigit():
                out[(b.broker, parts[0], int(parts[1]))] = int(parts[2])
    return out


def compacted_partitions(inp: Inputs) -> set[_KEY]:
    """Partitions a cleaner names in a checkpoint (every compacted log it hosts)."""
    return {(t, p) for (_, t, p) in _cleaner_offsets(inp)}


def cleaned_bounds(inp: Inputs) -> dict[_KEY, int]:
    """Per compacted partition, the offset from which every replica's segments are as replicated: the
    largest, over its replicas, base offset of the first segment at or past the replica's cleaner
    checkpoint (the segment holding the checkpoint may have been rewritten)."""
    bases: dict[tuple[int, str, int], list[int]] = {}
    for seg in inp.layout.segments:
        bases.setdefault((seg.broker, seg.topic, seg.partition), []).append(seg.base_offset)
    out: dict[_KEY, int] = {}
    for (broker, topic, partition), checkpoint in _cleaner_offsets(inp).items():
        later = sorted(b for b in bases.get((broker, topic, partition), []) if b >= checkpoint)
        lower = later[0] if later else checkpoint
        out[(topic, partition)] = max(out.get((topic, partition), 0), lower)
    return out


def above_cleaned(inp: Inputs, df: DataFrame, offset_col: str = "base_offset") -> DataFrame:
    """``df`` without the rows of compacted partitions below their cleaned range's end."""
    bounds = cleaned_bounds(inp)
    if not bounds:
        return df
    spark = df.sparkSession
    table = spark.createDataFrame(
        [(t, p, b) for (t, p), b in bounds.items()], "topic STRING, partition INT, cleaned_below LONG"
    )
    joined = df.join(F.broadcast(table), TP, "left")
    keep = F.col("cleaned_below").isNull() | (F.col(offset_col) >= F.col("cleaned_below"))
    return joined.filter(keep).drop("cleaned_below")


def without_compacted(inp: Inputs, df: DataFrame) -> DataFrame:
    """``df`` without the rows of compacted partitions."""
    parts = compacted_partitions(inp)
    if not parts:
        return df
    table = df.sparkSession.createDataFrame(list(parts), "topic STRING, partition INT")
    return df.join(F.broadcast(table), TP, "left_anti")


def compacted_note(inp: Inputs) -> str | None:
    parts = compacted_partitions(inp)
    if not parts:
        return None
    return (
        f"{len(parts)} compacted partition(s) judged only above their cleaned range here; below it, "
        "per key by compaction_kept_latest"
    )
