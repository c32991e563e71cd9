"""dump-log on a log with transactions: control records as kafka-dump-log.sh prints them (endTxnMarker,
coordinatorEpoch) and the partition's ``.txnindex`` entries."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from cli.dump_log_cmd import dump_log
from protocol.control_records import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch
from protocol.record_codec import Record
from protocol.records import TRANSACTIONAL_FLAG_MASK, build_batch
from storage.log import Log, LogConfig
from storage.producer_state_entry import AppendOrigin


def _log(directory: Path) -> None:
    log = Log.open(directory, "t", 0, LogConfig())
    for pid in (7, 8):
        batch = build_batch(
            [Record(0, 0, None, b"v"), Record(1, 0, None, b"w")],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=0,
            attributes=TRANSACTIONAL_FLAG_MASK,
        )
        log.append_as_leader(batch, 0)
    for pid, control_type in ((7, ControlRecordType.ABORT), (8, ControlRecordType.COMMIT)):
        marker = build_end_txn_marker_batch(pid, 0, EndTransactionMarker(control_type, 3), timestamp_ms=5)
        log.append_as_leader(marker, 0, AppendOrigin.COORDINATOR)
    log.close()


def test_dump_log_shows_markers_and_aborted_transactions(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _log(directory)
    result = CliRunner().invoke(dump_log, [str(directory), "--print-data-log"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("baseOffset: 4 " in line and "isTransactional: true isControl: true" in line for line in lines)
    record = "| offset: 4 CreateTime: 5 keySize: 4 valueSize: 6 sequence: -1 headerKeys: []"
    assert record + " endTxnMarker: ABORT coordinatorEpoch: 3" in lines
    assert any(line.endswith("endTxnMarker: COMMIT coordinatorEpoch: 3") for line in lines)
    assert "version: 0 producerId: 7 firstOffset: 0 lastOffset: 4 lastStableOffset: 2" in lines
    index = directory / "00000000000000000000.txnindex"
    data = json.loads(CliRunner().invoke(dump_log, [str(index), "-o", "json"]).output)
    assert data[0]["entries"] == [
        {"version": 0, "producer_id": 7, "first_offset": 0, "last_offset": 4, "last_stable_offset": 2}
    ]
