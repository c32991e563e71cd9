"""The producer's journal of acknowledged batches (``kit.producer.AckJournal``): a write that fails is the
producer's own failure, fatal, and never looks like the network's. An ``OSError`` is what the producer
retries (a connection lost), and a retry of a batch whose acknowledgement was being journaled sends an
acknowledged batch again: a duplicate in the log."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.cluster_client import ClientError
from kit.producer import AckJournal, JournalWriteError, ProduceStats


def test_a_failed_journal_write_is_fatal_and_not_an_os_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the journal's directory should be\n")
    journal = AckJournal(blocker / "workload", "p1")
    with pytest.raises(JournalWriteError) as caught:
        journal.acked(("t", 0), 0, 9, 1234, -1, 1_000, 1_010)
    error = caught.value
    # Not an OSError: the producer's retry loop takes those for a lost connection and sends again.
    assert not isinstance(error, OSError)
    assert isinstance(error, ClientError), "the command line shows it as its error, exit code 1"
    message = str(error)
    assert str(blocker / "workload" / "acked-p1.jsonl") in message
    assert "not sent again" in message and "--acked-journal" in message
    with pytest.raises(JournalWriteError):
        journal.failed(("t", 0), 10, 1_000, "NOT_LEADER_OR_FOLLOWER")
    with pytest.raises(JournalWriteError):
        journal.summary(1_000, None, 10, ProduceStats())
    journal.close()


def test_a_journal_that_can_be_written_is(tmp_path: Path) -> None:
    journal = AckJournal(tmp_path / "workload", "p2")
    journal.acked(("t", 1), 10, 19, 77, -1, 2_000, 2_005)
    journal.close()
    [line] = (tmp_path / "workload" / "acked-p2.jsonl").read_text().splitlines()
    assert '"base_offset":10' in line and '"last_offset":19' in line
