"""`isrsim run -- COMMAND` (docs/your-application.md): the user's own program as the workload, with real
processes. The default run: a program's failure is exit 4 with its code said. Marker ``clients``: a
confluent-kafka producer and consumer on a cluster run brings up are judged VALID, each client by its
client.id, from the brokers' client-activity.jsonl and served.jsonl. Marker ``chaos``: a seeded run with
faults under a kafka-python producer passes the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kit.cluster_files import ClusterInfo
from kit.processes import process_state
from server.journal import read_journal
from tests.integration.harness import REPO_ROOT, run_cli

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "docs" / "examples"


def example(name: str, *args: str) -> str:
    return " ".join([sys.executable, str(EXAMPLES / name), *args])


def report(root: Path) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((root / "report" / "report.json").read_text())
    return body


def lines(root: Path, name: str) -> list[dict[str, Any]]:
    return [x for p in sorted(root.glob(f"broker-*/{name}")) for x in read_journal(p)]


def stop_everything(root: Path) -> None:
    if (root / "cluster.json").exists():
        run_cli("cluster", "down", "--data-dir", str(root), check=False, timeout=120)


@pytest.mark.timeout(300)
def test_a_program_s_failure_is_exit_4_with_its_code(tmp_path: Path) -> None:
    root = tmp_path / "root"
    try:
        failed = run_cli(
            "run", "--data-dir", str(root), "--no-faults", "--no-report", "--keep-up", "--",
            "sh", "-c", "echo about to fail; exit 7",
            check=False, timeout=180,
        )  # fmt: skip
        assert failed.returncode == 4, failed.stderr[-3000:]
        assert "exit code 7" in failed.stdout
        assert "app-1| about to fail" in failed.stdout  # its output, prefixed
        assert (root / "workload" / "app-1.log").read_text() == "about to fail\n"
        info = ClusterInfo.load(root)
        assert all(process_state(b.pid) == "running" for b in info.brokers)  # --keep-up

        # Again on the running cluster, with a rules file (SPEC §16): in force while the program runs.
        rules = tmp_path / "rules.json"
        rules.write_text(json.dumps([{"api": "Metadata", "delay_ms": 10, "count": 1}]))
        ran = run_cli(
            "run", "--data-dir", str(root), "--no-faults", "--no-report", "--rules", str(rules), "--",
            "sh", "-c", sh_listing_rules(root),
            check=False, timeout=180,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        assert "Metadata" in (root / "workload" / "app-2.log").read_text()  # the rule, listed while it ran
        actions = [x["action"] for x in read_journal(root / "faults.jsonl")]
        assert "rule_add" in actions and "rule_remove" in actions
        assert not run_cli("fault", "list", "--data-dir", str(root)).stdout.count("Metadata")  # removed
    finally:
        stop_everything(root)


def sh_listing_rules(root: Path) -> str:
    return f"{sys.executable} -m cli.main fault list --data-dir {root}"


@pytest.mark.clients
@pytest.mark.timeout(400)
def test_a_producer_and_a_consumer_are_judged_by_client_id(tmp_path: Path) -> None:
    root = tmp_path / "root"
    try:
        # No cluster at the root: run brings one up, and stops it after.
        program = (
            example("confluent_producer.py", "--count", "3000")
            + " && "
            + example("confluent_consumer.py", "--count", "3000")
        )
        ok = run_cli(
            "run", "--data-dir", str(root), "--no-faults", "--duration", "90", "--", "sh", "-c", program,
            check=False, timeout=300,
        )  # fmt: skip
        assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-3000:]
        body = report(root)
        assert body["verdict"] == "valid"
        clients = {c["client_id"]: c for c in body["clients"]}
        assert clients["orders-producer"]["kind"] == "producer"
        assert clients["orders-producer"]["records_acked"] == 3000
        assert clients["orders-consumer"]["kind"] == "consumer"
        assert clients["orders-consumer"]["records_served"] >= 3000
        info = ClusterInfo.load(root)
        assert all(process_state(b.pid) != "running" for b in info.brokers)  # it stopped what it started

        activity = lines(root, "client-activity.jsonl")
        produced = [x for x in activity if x["client_id"] == "orders-producer" and x["api"] == "produce"]
        assert sum(x["records"] for x in produced) == 3000
        assert {x["topic"] for x in produced} == {"orders"}
        served = [x for x in lines(root, "served.jsonl") if x["client_id"] == "orders-consumer"]
        assert {x["partition"] for x in served} == set(range(6))
        assert all(x["isolation_level"] == "read_committed" for x in served)
        events = lines(root, "events.jsonl")
        [generation] = [
            e for e in events if e.get("event") == "group_generation" and e["group"] == "orders-app"
        ]
        [member] = generation["members"]
        assert member["client_id"] == "orders-consumer" and member["assignment"] == {"orders": list(range(6))}
        commits = [e for e in events if e.get("event") == "offset_commit" and e["group"] == "orders-app"]
        final = {}
        for c in commits:
            final[c["partition"]] = max(final.get(c["partition"], 0), c["offset"])
        assert sum(final.values()) == 3000  # every record processed was committed
        acked = lines(root, "acked.jsonl")
        assert acked and all(a["received_ms"] <= a["ts_ms"] for a in acked)
    finally:
        stop_everything(root)


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_a_seeded_run_with_faults_under_a_kafka_python_producer_is_valid(tmp_path: Path) -> None:
    root = tmp_path / "root"
    try:
        proc = run_cli(
            "run", "--data-dir", str(root), "--seed", "11", "--duration", "40", "--interval", "4",
            "--faults", "kill,term,pause,partition,delay", "--targets", "brokers", "--",
            sys.executable, str(EXAMPLES / "kafka_python_producer.py"), "--count", "15000", "--rate", "500",
            check=False, timeout=800,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
        assert "seed 11" in proc.stdout
        body = report(root)
        assert body["verdict"] == "valid"
        clients = {c["client_id"]: c for c in body["clients"]}
        assert clients["payments-producer"]["records_acked"] >= 15000
        faults = (root / "faults.jsonl").read_text().splitlines()
        assert len(faults) >= 6  # the program ran through several faults (a start and an end each)
        chaos = json.loads((root / "chaos.json").read_text())
        assert chaos["seed"] == 11
    finally:
        stop_everything(root)
