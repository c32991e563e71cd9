"""The report on a real run of a three-voter quorum (`isrsim cluster up --controllers 3`) in which a topic was
deleted, and another deleted and made again with the same name, and in which Kafka's own clients wrote
beside `isrsim produce`: the deleted topic is not judged (and nothing of it counts as lost), the topic made
again is, every acknowledged batch counts in the availability figures, and the voters' metadata logs on
disk are compared; a copy whose committed metadata batch was tampered with fails `metadata_log_matching`."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spark_jobs.inputs import load_inputs
from spark_jobs.layout import discover
from spark_jobs.quorum_checks import check_metadata_log_matching
from spark_jobs.report_job import EXIT_OK, ReportOutcome, run_report
from tests.integration.cluster_support import FAST
from tests.integration.harness import run_cli

pytestmark = [pytest.mark.spark, pytest.mark.integration]

HEADER_CRC_AT = 17  # base_offset 8 + batch_length 4 + partition_leader_epoch 4 + magic 1


def _cli(root: Path, *args: str) -> str:
    return run_cli(*args, "--data-dir", str(root), timeout=90).stdout


def _create_when_deleted(root: Path, topic: str) -> None:
    """`topic create` once the deletion of the topic of that name has completed (the controller refuses
    to make it again while a replica has not stopped)."""
    deadline = time.monotonic() + 30
    while True:
        made = run_cli(
            "topic", "create", topic, "--partitions", "1", "--replication-factor", "2",
            "--data-dir", str(root), check=False, timeout=60,
        )  # fmt: skip
        if made.returncode == 0:
            return
        assert time.monotonic() < deadline, made.stderr
        time.sleep(0.2)


def _bootstrap(root: Path) -> str:
    info = json.loads((root / "cluster.json").read_text())
    return ",".join(f"{b['host']}:{b['port']}" for b in info["brokers"])


def _kafka_clients_write(root: Path, topic: str) -> int:
    """confluent-kafka (librdkafka) and kafka-python each write 5 records, acks=all; the records
    acknowledged."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer

    bootstrap = _bootstrap(root)
    acked: list[object] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(5):
        p.produce(
            topic,
            value=f"rd-{i}".encode(),
            on_delivery=lambda err, msg: acked.append(msg) if not err else None,
        )
        p.flush(30)
    kp = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(5):
        kp.send(topic, f"kp-{i}".encode()).get(timeout=30)
        acked.append(i)
    kp.close(timeout=10)
    return len(acked)


@pytest.fixture(scope="module")
def quorum_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    root = tmp_path_factory.mktemp("quorum") / "cluster"
    args = [
        "cluster",
        "up",
        "--brokers",
        "2",
        "--controllers",
        "3",
        "--data-dir",
        str(root),
        "--base-port",
        "0",
    ]
    for s in FAST:
        args += ["--override", s]
    run_cli(*args, timeout=120)
    try:
        for topic in ("t", "gone", "again"):
            _cli(root, "topic", "create", topic, "--partitions", "1", "--replication-factor", "2")
            _cli(root, "produce", topic, "--count", "600", "--no-progress")
        others = _kafka_clients_write(root, "t")
        _cli(root, "topic", "delete", "gone")
        _cli(root, "topic", "delete", "again")
        _create_when_deleted(root, "again")
        _cli(root, "produce", "again", "--count", "400", "--no-progress")
    finally:
        run_cli("cluster", "down", "--data-dir", str(root), timeout=120, check=False)
    yield root, others


def _report(spark: Any, root: Path, out: Path) -> ReportOutcome:
    with open(out.parent / "console.txt", "w") as f:
        return run_report(spark, root, out, console=Console(file=f, width=80), max_plots=1)


def _check(outcome: ReportOutcome, name: str) -> dict[str, Any]:
    return next(c for c in outcome.report["checks"] if c["name"] == name)


@pytest.fixture(scope="module")
def quorum_report(
    spark: Any, quorum_run: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ReportOutcome, Path]:
    """The whole report of the untouched run, once for the tests that judge it; and its directory."""
    out = tmp_path_factory.mktemp("quorum-report")
    return _report(spark, quorum_run[0], out / "report"), out


def test_deleted_topics_other_clients_and_the_metadata_logs(
    quorum_run: tuple[Path, int], quorum_report: tuple[ReportOutcome, Path]
) -> None:
    _, others = quorum_run
    outcome, tmp_path = quorum_report
    bad = {c["name"]: c["examples"][:2] for c in outcome.report["checks"] if c["verdict"] != "valid"}
    assert outcome.exit_code == EXIT_OK, bad
    # The deleted topic is left out, and said so; the one made again is judged (its replicas hold the
    # second incarnation's 400 records).
    conv = _check(outcome, "convergence")
    assert conv["extra"]["deleted_partitions"] == [{"topic": "gone", "partition": 0}]
    assert any(n.startswith("1 deleted partition(s) left out: gone-0") for n in conv["notes"])
    final = {(p["topic"], p["partition"]): p for p in conv["extra"]["partitions"]}
    assert ("gone", 0) not in final
    assert sorted(r["leo"] for r in final[("again", 0)]["replicas"]) == [400, 400]
    # The batches acknowledged before each deletion went with the topic: not lost, and counted apart.
    acked = _check(outcome, "acked_not_lost")
    assert any("of topics deleted after they were acknowledged left out" in n for n in acked["notes"])
    # Availability counts every acknowledged record, the Kafka clients' too.
    a = outcome.report["availability"]
    assert a["other_clients_records"] == others == 10
    assert (a["intended"], a["acknowledged"]) == (600 * 3 + 400 + others, 600 * 3 + 400 + others)
    assert a["counted_by"] == "workload and acknowledgement journals"
    # The voters' metadata logs were read from disk and compared.
    meta = _check(outcome, "metadata_log_matching")
    assert meta["checked"] and meta["checked"] > 5
    assert "__cluster_metadata-0 segments of 3 voter(s)" in meta["notes"][0]
    lines = (tmp_path / "console.txt").read_text().splitlines()
    first = next(line for line in lines if line.startswith("isrsim report: "))
    assert first.startswith("isrsim report: VALID") and "; longest stall " in first


def _committed_batches(root: Path, voter: int) -> list[tuple[int, int]]:
    """(position, size) of the batches of the voter's metadata log segment, first to last."""
    seg = next((root / f"controller-{voter}" / "__cluster_metadata-0").glob("*.log"))
    data = seg.read_bytes()
    out, pos = [], 0
    while pos + 12 <= len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big") + 12
        out.append((pos, size))
        pos += size
    return out


@pytest.mark.parametrize("damage", ["record_bytes", "header_crc"])
def test_a_tampered_committed_metadata_batch_fails(
    spark: Any,
    quorum_run: tuple[Path, int],
    quorum_report: tuple[ReportOutcome, Path],
    tmp_path: Path,
    damage: str,
) -> None:
    root, _ = quorum_run
    copy = tmp_path / "cluster"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("report"))
    seg = next((copy / "controller-1001" / "__cluster_metadata-0").glob("*.log"))
    pos, size = _committed_batches(copy, 1001)[1]  # an early batch: committed by every voter
    data = bytearray(seg.read_bytes())
    if damage == "record_bytes":
        data[pos + size - 1] ^= 0xFF  # the batch no longer matches its CRC
    else:
        data[pos + HEADER_CRC_AT] ^= 0xFF  # another CRC: a batch the other voters do not hold
    seg.write_bytes(bytes(data))
    inputs = load_inputs(spark, discover(copy))
    result = check_metadata_log_matching(inputs)
    assert result.verdict == "invalid", result.notes
    ex = result.examples[0]
    expected = (
        "a committed batch's bytes do not match its CRC"
        if damage == "record_bytes"
        else "voters hold different committed batches at this offset"
    )
    assert ex["problem"] == expected and "voter 1001 log" in ex["detail"], ex
    # The untouched run passes the same check (in its whole report).
    assert _check(quorum_report[0], "metadata_log_matching")["verdict"] == "valid"
