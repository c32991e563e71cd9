"""`isrsim produce` whose journal of acknowledged batches cannot be written: the run stops with an error
that names the journal, and the batch that was acknowledged is in the log once. (It used to be taken for a
network error and sent again until delivery.timeout.ms: without idempotence, a copy per retry.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from protocol.records import iter_batches
from tests.integration.harness import BrokerProcess, read_partition, run_cli

pytestmark = pytest.mark.integration


def test_a_journal_that_cannot_be_written_stops_the_producer_and_nothing_is_sent_twice(
    single_broker: BrokerProcess, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the journal's directory should be\n")
    proc = run_cli(
        "produce", "t", "--count", "10", "--batch-records", "10", "--acks", "all", "--no-idempotence",
        "--delivery-timeout-ms", "5000", "--retry-backoff-ms", "10", "--no-progress",
        "--acked-journal", str(blocker / "workload"), "--bootstrap-server", single_broker.address,
        check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "cannot write the producer's journal" in proc.stderr and "not sent again" in proc.stderr
    assert "Traceback" not in proc.stderr
    batches = 0
    for partition in (0, 1):
        log = trio.run(read_partition, single_broker.host, single_broker.port, "t", partition)
        batches += sum(1 for _ in iter_batches(log))
    assert batches == 1, f"the acknowledged batch was written {batches} times"
