"""`isrsim cluster status --bootstrap-server`: a cluster this command did not start (docker compose), seen
through its listeners only: the brokers the bootstrap server names, each one's replicas and offsets."""

from __future__ import annotations

import json

import pytest

from tests.integration.harness import BrokerProcess, run_cli

pytestmark = pytest.mark.integration


def test_status_through_a_bootstrap_server(single_broker: BrokerProcess) -> None:
    run_cli("produce", "t", "--count", "400", "--acks", "1", "--no-idempotence", "--no-acked-journal",
            "--no-progress", "--bootstrap-server", single_broker.address)  # fmt: skip
    proc = run_cli("cluster", "status", "--bootstrap-server", single_broker.address, "-o", "json",
                   "--data-dir", "/nonexistent")  # fmt: skip
    status = json.loads(proc.stdout)
    [broker] = status["brokers"]
    assert broker["id"] == 1 and broker["state"] == "answering" and broker["address"] == single_broker.address
    assert broker["pid"] is None
    # A broker answered: the controller was not asked.
    assert status["controller"]["state"] == "not asked"
    parts = {p["partition"]: p for p in status["partitions"] if p["topic"] == "t"}
    assert set(parts) == {0, 1}
    assert sum(p["offsets"]["1"]["log_end_offset"] for p in parts.values()) == 400
    text = run_cli("cluster", "status", "--bootstrap-server", single_broker.address).stdout
    assert "answering" in text


def test_status_when_no_bootstrap_server_answers() -> None:
    proc = run_cli("cluster", "status", "--bootstrap-server", "127.0.0.1:1", check=False)
    assert proc.returncode == 1
    assert "no bootstrap server answered (127.0.0.1:1)" in proc.stderr and "Traceback" not in proc.stderr
