"""dump-log on a compacted partition: a tombstone batch's delete horizon (Kafka's deleteHorizonMs), the
partition's cleaner-offset-checkpoint entry and a clean a crash left mid-swap."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli.dump_log_cmd import dump_log
from protocol.record_codec import Record
from protocol.records import build_batch
from storage.checkpoint import OffsetCheckpointFile
from storage.cleaner_manager import clean_log_now
from storage.log import Log, LogConfig


def test_dump_log_shows_the_cleaners_state(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(
        directory, "t", 0, LogConfig(segment_bytes=300, cleanup_policy="compact", delete_retention_ms=1000)
    )
    for i in range(8):
        value = None if i == 6 else b"v%d" % i
        log.append_as_leader(build_batch([Record(0, 0, b"k%d" % (i % 2), value)], base_timestamp=0), 0)
    log.roll()
    result = clean_log_now(log, log.log_end_offset, now_ms=5000)
    assert result is not None
    OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").write({("t", 0): result.end_offset})
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"")
    log.close()
    out = CliRunner().invoke(dump_log, [str(directory)])
    assert out.exit_code == 0, out.output
    assert "baseOffset: 6 lastOffset: 6 count: 1" in out.output and "deleteHorizonMs: 6000" in out.output
    assert f"Cleaner checkpoint: {result.end_offset}" in out.output
    assert "Interrupted clean: 00000000000000000000.log.cleaned" in out.output
    as_json = json.loads(CliRunner().invoke(dump_log, [str(directory), "--output", "json"]).output)
    cleaner = [d for d in as_json if "cleaner_checkpoint" in d]
    assert cleaner == [
        {
            "file": str(tmp_path / "cleaner-offset-checkpoint"),
            "cleaner_checkpoint": result.end_offset,
            "interrupted_clean_files": ["00000000000000000000.log.cleaned"],
        }
    ]
