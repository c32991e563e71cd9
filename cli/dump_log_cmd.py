"""``isrsim dump-log``: the batches of a segment, or of every segment of a partition, in the style of
Kafka's ``kafka-dump-log.sh --files``: offsets, count, leader epoch, position, size, CRC and whether it is
valid. A torn or corrupt tail is reported where it starts, not raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.output import OUTPUT_OPTION, echo_json
from protocol import CorruptRecordError, batch_crc, decode_records, read_header


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
        batch: dict[str, Any] = {
            "base_offset": h.base_offset,
            "last_offset": h.last_offset,
            "count": h.records_count,
            "partition_leader_epoch": h.partition_leader_epoch,
            "position": pos,
            "create_time": h.max_timestamp,
            "size": h.size,
            "magic": h.magic,
            "crc": h.crc,
            "is_valid": computed == h.crc,
        }
        if with_records and batch["is_valid"]:
            _, records = decode_records(data, pos)
            batch["records"] = [
                {
                    "offset": h.base_offset + r.offset_delta,
                    "key": None if r.key is None else r.key.decode("utf-8", "replace"),
                    "payload": None if r.value is None else r.value.decode("utf-8", "replace"),
                }
                for r in records
            ]
        batches.append(batch)
        pos += h.size
    return {"file": str(path), "size": len(data), "batches": batches, "valid_bytes": pos, "problem": problem}


@click.command("dump-log")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--print-data-log", is_flag=True, help="Also print each record's offset, key and payload.")
@OUTPUT_OPTION
def dump_log(path: Path, print_data_log: bool, output: str) -> None:
    """Print the batches of PATH: a segment (<base offset>.log) or a partition directory (every segment),
    like kafka-dump-log.sh --files. Exits 1 if a batch is corrupt or the file ends in a torn batch."""
    dumps = [dump_segment(f, print_data_log) for f in segment_files(path)]
    if output == "json":
        echo_json(dumps)
    else:
        for d in dumps:
            click.echo(f"Dumping {d['file']}")
            first = d["batches"][0]["base_offset"] if d["batches"] else Path(d["file"]).stem.lstrip("0") or 0
            click.echo(f"Log starting offset: {first}")
            for b in d["batches"]:
                click.echo(
                    f"baseOffset: {b['base_offset']} lastOffset: {b['last_offset']} count: {b['count']} "
                    f"partitionLeaderEpoch: {b['partition_leader_epoch']} position: {b['position']} "
                    f"CreateTime: {b['create_time']} size: {b['size']} magic: {b['magic']} "
                    f"crc: {b['crc']} isvalid: {str(b['is_valid']).lower()}"
                )
                for r in b.get("records", []):
                    click.echo(f"| offset: {r['offset']} key: {r['key']} payload: {r['payload']}")
            if d["problem"]:
                click.echo(f"Found a problem at position {d['valid_bytes']}: {d['problem']}")
    bad = [d["file"] for d in dumps if d["problem"] or not all(b["is_valid"] for b in d["batches"])]
    if bad:
        raise click.ClickException(f"corrupt or torn batches in {', '.join(bad)}")
