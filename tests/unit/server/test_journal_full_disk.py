"""A journal on a full disk (/dev/full answers every write with ENOSPC) loses lines, says so once, and never
raises into the request that emitted the event."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.journal import Journal, read_journal


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_write_errors_are_logged_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Path("/dev/full"), 1)
    with caplog.at_level("ERROR"):
        for i in range(5):
            journal.emit("offsets", n=i)
    journal.close()
    assert journal.lost_lines == 5
    assert caplog.text.count("cannot write the journal /dev/full") == 1


def test_a_working_journal_loses_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "events.jsonl", 1)
    journal.emit("broker_started", port=1)
    journal.close()
    assert journal.lost_lines == 0 and read_journal(tmp_path / "events.jsonl")[0]["port"] == 1
