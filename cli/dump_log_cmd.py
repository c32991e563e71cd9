"""``isrsim dump-log``: the batches of a segment, or of every segment of a partition, as Kafka's
``kafka-dump-log.sh --files`` prints them: offsets, count, producer fields, leader epoch, position, size,
codec, CRC and whether it is valid; with ``--print-data-log`` each record too (offset, timestamp, sizes,
header keys, key and payload), compressed batches decompressed, and a control record's end-transaction
marker (COMMIT or ABORT, coordinator epoch). A ``.txnindex`` file's aborted transactions are printed as
Kafka's ``AbortedTxn`` entries. A torn or corrupt tail is reported where it starts, not raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.output import OUTPUT_OPTION, echo_json
from protocol import (
    CompressionType,
    CorruptRecordError,
    KafkaError,
    batch_crc,
    decode_end_txn_marker,
    decode_records,
    read_header,
)

_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_DELETE_HORIZON = 0x40  # attributes bit 6: the batch carries a delete horizon


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


def _codec_name(attributes: int) -> str:
    codec = attributes & 0x07
    return CompressionType(codec).config_name if codec <= 4 else f"unknown({codec})"


def segment_files(path: Path) -> list[Path]:
    """The ``.log`` segments at ``path``: the file itself, or a partition directory's, by base offset."""
    if path.is_dir():
        files = sorted(path.glob("*.log"))
        if not files:
            raise click.ClickException(f"{path} holds no .log segment (is it a <topic>-<partition> dir?)")
        return files
    if not path.exists():
        raise click.ClickException(f"{path} does not exist")
    return [path]


def dump_index(path: Path) -> dict[str, Any]:
    """The entries of a ``.index`` (relative offset i32, position i32) or ``.timeindex`` (timestamp i64,
    relative offset i32) file, Kafka's formats, with absolute offsets."""
    import struct

    base = int(path.stem) if path.stem.isdigit() else 0
    data = path.read_bytes()
    if path.suffix == ".timeindex":
        size, fmt = 12, struct.Struct(">qi")
        entries = [
            {"timestamp": ts, "offset": base + rel}
            for ts, rel in fmt.iter_unpack(data[: len(data) // size * size])
        ]
    else:
        size, fmt = 8, struct.Struct(">ii")
        entries = [
            {"offset": base + rel, "position": pos}
            for rel, pos in fmt.iter_unpack(data[: len(data) // size * size])
        ]
    problem = f"{len(data) % size} bytes after the last whole entry" if len(data) % size else None
    return {"file": str(path), "size": len(data), "entries": entries, "problem": problem}


def dump_txn_index(path: Path) -> dict[str, Any]:
    """The entries of a ``.txnindex`` file: Kafka's ``AbortedTxn`` (version i16, producer_id i64,
    first_offset i64, last_offset i64, last_stable_offset i64; 34 bytes each)."""
    import struct

    size, fmt = 34, struct.Struct(">hqqqq")
    data = path.read_bytes()
    entries = [
        {
            "version": version,
            "producer_id": producer_id,
            "first_offset": first,
            "last_offset": last,
            "last_stable_offset": lso,
        }
        for version, producer_id, first, last, lso in fmt.iter_unpack(data[: len(data) // size * size])
    ]
    problem = f"{len(data) % size} bytes after the last whole entry" if len(data) % size else None
    return {"file": str(path), "size": len(data), "entries": entries, "problem": problem}


def _control_fields(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    """A control record's end-transaction marker, as kafka-dump-log.sh names it."""
    try:
        marker = decode_end_txn_marker(key, value)
    except KafkaError as exc:
        return {"control_problem": exc.message}
    return {"end_txn_marker": marker.control_type.name, "coordinator_epoch": marker.coordinator_epoch}


def dump_segment(path: Path, with_records: bool = False) -> dict[str, Any]:
    """Every batch of one segment, and where (if anywhere) the bytes stop being a batch."""
    data = path.read_bytes()
    batches: list[dict[str, Any]] = []
    pos = 0
    problem = None
    while pos < len(data):
        try:
            h = read_header(data, pos)
        except CorruptRecordError as exc:
            problem = str(exc)
            break
        if pos + h.size > len(data):
            problem = f"batch at position {pos}: {h.size} bytes claimed, {len(data) - pos} left (a torn tail)"
            break
        computed = batch_crc(data, pos)
        last_sequence = -1 if h.base_sequence < 0 else h.base_sequence + h.last_offset_delta
        batch: dict[str, Any] = {
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "count": h.records_count,
            "base_sequence": h.base_sequence,
            "last_sequence": last_sequence,
            "producer_id": h.producer_id,
            "producer_epoch": h.producer_epoch,
            "partition_leader_epoch": h.partition_leader_epoch,
            "is_transactional": bool(h.attributes & _TRANSACTIONAL),
            "is_control": bool(h.attributes & _CONTROL),
            "position": pos,
            "create_time": h.max_timestamp,
            "size": h.size,
            "magic": h.magic,
            "compresscodec": _codec_name(h.attributes),
            "crc": h.crc,
            "is_valid": computed == h.crc,
            # Set by the log cleaner on a batch with tombstones or an empty transaction's marker (KIP-534).
            "delete_horizon_ms": h.base_timestamp if h.attributes & _DELETE_HORIZON else None,
        }
        if with_records and batch["is_valid"]:
            try:
                _, records = decode_records(data, pos)
            except CorruptRecordError as exc:  # a codec it cannot read, records that do not parse
                batch["records_problem"] = str(exc)
                records = []
            batch["records"] = [
                {
                    "offset": h.base_offset + r.offset_delta,
                    "create_time": h.base_timestamp + r.timestamp_delta,
                    "key_size": -1 if r.key is None else len(r.key),
                    "value_size": -1 if r.value is None else len(r.value),
                    "sequence": -1 if h.base_sequence < 0 else h.base_sequence + r.offset_delta,
                    "header_keys": [k for k, _ in r.headers],
                    "headers": [[k, _text(v)] for k, v in r.headers],
                    "key": _text(r.key),
                    "payload": _text(r.value),
                    **(_control_fields(r.key, r.value) if batch["is_control"] else {}),
                }
                for r in records
            ]
        batches.append(batch)
        pos += h.size
    return {"file": str(path), "size": len(data), "batches": batches, "valid_bytes": pos, "problem": problem}


@click.command("dump-log")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--files",
    "files",
    multiple=True,
    metavar="FILE[,FILE...]",
    help="Comma-separated segments, partition directories or index files (kafka-dump-log.sh --files).",
)
@click.option(
    "--print-data-log",
    is_flag=True,
    help="Also print each record: offset, timestamp, sizes, header keys, key and payload (decompressed).",
)
@OUTPUT_OPTION
def dump_log(paths: tuple[Path, ...], files: tuple[str, ...], print_data_log: bool, output: str) -> None:
    """Print the batches of each PATH (or of each file of --files, comma-separated, as kafka-dump-log.sh
    --files): a segment (<base offset>.log) or a partition directory (every segment, then its .txnindex
    files); or the entries of a .index, .timeindex or .txnindex file. Exits 1 if a batch is corrupt or a
    file ends in a torn batch."""
    wanted = [*paths, *(Path(f.strip()) for item in files for f in item.split(",") if f.strip())]
    if not wanted:
        raise click.UsageError("name what to dump: PATH or --files FILE[,FILE...]")
    dumps: list[dict[str, Any]] = []
    for path in wanted:
        if path.suffix in (".index", ".timeindex") and path.is_file():
            dumps.append(dump_index(path))
        elif path.suffix == ".txnindex" and path.is_file():
            dumps.append(dump_txn_index(path))
        else:
            dumps += [dump_segment(f, print_data_log) for f in segment_files(path)]
            if path.is_dir():  # a partition directory: its aborted transactions and cleaner state too
                dumps += [dump_txn_index(f) for f in sorted(path.glob("*.txnindex"))]
                cleaner = dump_cleaner_state(path)
                if cleaner is not None:
                    dumps.append(cleaner)
    if output == "json":
        echo_json(dumps)
    else:
        for d in dumps:
            if "entries" in d:
                _print_index(d)
            elif "cleaner_checkpoint" in d:
                _print_cleaner_state(d)
            else:
                _print_segment(d)
    # An index that ends in part of an entry is named with its problem; segments with a bad batch together.
    problems = [f"{d['file']}: {d['problem']}" for d in dumps if "entries" in d and d["problem"]]
    bad = [
        d["file"]
        for d in dumps
        if "batches" in d and (d["problem"] or not all(b["is_valid"] for b in d["batches"]))
    ]
    if bad:
        problems.append(f"corrupt or torn batches in {', '.join(bad)}")
    if problems:
        raise click.ClickException("; ".join(problems))


def dump_cleaner_state(partition_dir: Path) -> dict[str, Any] | None:
    """A partition directory's log cleaner state: its ``cleaner-offset-checkpoint`` entry (in the log
    directory above it) and any ``.cleaned`` / ``.swap`` file a clean killed mid-swap left (settled at the
    broker's next start). None when there is neither."""
    leftovers = sorted(p.name for p in partition_dir.iterdir() if p.suffix in (".cleaned", ".swap"))
    checkpoint = partition_dir.parent / "cleaner-offset-checkpoint"
    offset = None
    topic, _, partition = partition_dir.name.rpartition("-")
    if checkpoint.is_file():
        for line in checkpoint.read_text().splitlines()[2:]:
            parts = line.split()
            if len(parts) == 3 and parts[0] == topic and parts[1] == partition:
                offset = int(parts[2])
    if offset is None and not leftovers:
        return None
    return {"file": str(checkpoint), "cleaner_checkpoint": offset, "interrupted_clean_files": leftovers}


def _print_cleaner_state(d: dict[str, Any]) -> None:
    if d["cleaner_checkpoint"] is not None:
        click.echo(f"Cleaner checkpoint: {d['cleaner_checkpoint']} (the log cleaner has cleaned below it)")
    for name in d["interrupted_clean_files"]:
        click.echo(f"Interrupted clean: {name} (settled at the broker's next start)")


def _print_index(index: dict[str, Any]) -> None:
    click.echo(f"Dumping {index['file']}")
    for e in index["entries"]:
        if "producer_id" in e:
            click.echo(
                f"version: {e['version']} producerId: {e['producer_id']} firstOffset: {e['first_offset']} "
                f"lastOffset: {e['last_offset']} lastStableOffset: {e['last_stable_offset']}"
            )
        elif "timestamp" in e:
            click.echo(f"timestamp: {e['timestamp']} offset: {e['offset']}")
        else:
            click.echo(f"offset: {e['offset']} position: {e['position']}")
    if index["problem"]:
        click.echo(f"Found a problem: {index['problem']}")


def _print_segment(d: dict[str, Any]) -> None:
    click.echo(f"Dumping {d['file']}")
    first = d["batches"][0]["base_offset"] if d["batches"] else Path(d["file"]).stem.lstrip("0") or 0
    click.echo(f"Log starting offset: {first}")
    for b in d["batches"]:
        click.echo(
            f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
            f"baseSequence: {b['base_sequence']} lastSequence: {b['last_sequence']} "
            f"producerId: {b['producer_id']} producerEpoch: {b['producer_epoch']} "
            f"partitionLeaderEpoch: {b['partition_leader_epoch']} "
            f"isTransactional: {str(b['is_transactional']).lower()} "
            f"isControl: {str(b['is_control']).lower()} position: {b['position']} "
            f"CreateTime: {b['create_time']} size: {b['size']} magic: {b['magic']} "
            f"compresscodec: {b['compresscodec']} crc: {b['crc']} "
            f"isvalid: {str(b['is_valid']).lower()}"
            + (
                f" deleteHorizonMs: {b['delete_horizon_ms']}"
                if b.get("delete_horizon_ms") is not None
                else ""
            )
        )
        for r in b.get("records", []):
            keys = ",".join(r["header_keys"])
            if b["is_control"]:
                what = (
                    f"endTxnMarker: {r['end_txn_marker']} coordinatorEpoch: {r['coordinator_epoch']}"
                    if "end_txn_marker" in r
                    else f"control record not read: {r.get('control_problem')}"
                )
                click.echo(
                    f"| offset: {r['offset']} CreateTime: {r['create_time']} keySize: {r['key_size']} "
                    f"valueSize: {r['value_size']} sequence: {r['sequence']} headerKeys: [{keys}] {what}"
                )
                continue
            key = f" key: {r['key']}" if r["key"] is not None else ""
            click.echo(
                f"| offset: {r['offset']} CreateTime: {r['create_time']} keySize: {r['key_size']} "
                f"valueSize: {r['value_size']} sequence: {r['sequence']} headerKeys: [{keys}]"
                f"{key} payload: {r['payload'] if r['payload'] is not None else ''}"
            )
        if b.get("records_problem"):
            click.echo(f"| records cannot be read: {b['records_problem']}")
    if d["problem"]:
        click.echo(f"Found a problem at position {d['valid_bytes']}: {d['problem']}")
