"""A managed cluster made with `isrsim cluster up` (controller + brokers as real processes) for tests, and
checks over what it leaves on disk."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import trio

from kit.cluster_files import ClusterInfo
from kit.local_cluster import kill_cluster
from kit.processes import process_state
from protocol.api_keys import ApiKeys
from protocol.records import iter_batches
from protocol.security import ClientSecurity
from tests.integration.harness import REPO_ROOT, events, python_cmd, request, run_cli, wait_until

FAST = (
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=2000",
    "replica.fetch.backoff.ms=200",
    "min.insync.replicas=2",
    "controlled.shutdown.timeout.ms=10000",
)


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.up_output = ""  # what `isrsim cluster up` printed

    @property
    def info(self) -> ClusterInfo:
        return ClusterInfo.load(self.root)

    def cli(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--data-dir", str(self.root), check=check, timeout=timeout)

    def controller_events(self, event: str | None = None) -> list[dict[str, Any]]:
        return events(Path(self.info.controller.journal), event)

    def broker_events(self, broker_id: int, event: str | None = None) -> list[dict[str, Any]]:
        return events(Path(self.info.broker(broker_id).journal), event)

    @property
    def security(self) -> ClientSecurity | None:
        """The admin's client config of a secure cluster (``cluster up --secure``), else None."""
        path = self.root / "client.properties"
        return ClientSecurity.from_file(path) if path.is_file() else None

    def ask(self, target: str | int, api: int, body: dict[str, Any]) -> dict[str, Any]:
        entry = self.info.controller if target == "controller" else self.info.broker(int(target))
        return trio.run(partial(request, security=self.security), entry.host, entry.port, api, body)

    def metadata(self, topic: str) -> dict[int, dict[str, Any]]:
        resp = self.ask("controller", ApiKeys.METADATA, {"topics": [{"name": topic}]})
        return {p["partition_index"]: p for p in resp["topics"][0]["partitions"]}

    def leader(self, topic: str, partition: int) -> int:
        return int(self.metadata(topic)[partition]["leader_id"])

    def isr_full(self, topic: str) -> bool:
        meta = self.metadata(topic)
        return bool(meta) and all(
            p["leader_id"] >= 0 and sorted(p["isr_nodes"]) == sorted(p["replica_nodes"])
            for p in meta.values()
        )

    def replica_offsets(self, topic: str) -> dict[tuple[int, int], tuple[int, int]]:
        out: dict[tuple[int, int], tuple[int, int]] = {}
        for b in self.info.brokers:
            if process_state(b.pid) != "running":
                continue
            resp = trio.run(
                partial(request, security=self.security),
                b.host,
                b.port,
                ApiKeys.DESCRIBE_REPLICA_STATE,
                {"topics": [{"name": topic}]},
            )
            for p in resp["partitions"]:
                out[(b.id, p["partition"])] = (p["log_end_offset"], p["high_watermark"])
        return out

    def wait_converged(self, topic: str, partitions: int, timeout: float = 60.0) -> dict[int, int]:
        """Every replica of every partition has LEO == HW, equal on all brokers; returns LEO per partition."""

        def done() -> dict[int, int] | None:
            offsets = self.replica_offsets(topic)
            per: dict[int, set[tuple[int, int]]] = {}
            for (_, p), v in offsets.items():
                per.setdefault(p, set()).add(v)
            if len(per) != partitions or len(offsets) != partitions * len(self.info.brokers):
                return None
            if any(len(v) != 1 or next(iter(v))[0] != next(iter(v))[1] for v in per.values()):
                return None
            return {p: next(iter(v))[0] for p, v in per.items()}

        return wait_until(
            done, timeout=timeout, interval=0.2, message=lambda: f"convergence: {self.replica_offsets(topic)}"
        )

    def producer(
        self, topic: str, count: int, *, acks: str = "all", rate: int | None = None
    ) -> subprocess.Popen[str]:
        args = [
            "produce",
            topic,
            "--count",
            str(count),
            "--acks",
            acks,
            "--data-dir",
            str(self.root),
            "--no-progress",
        ]
        if rate:
            args += ["--rate", str(rate)]
        return subprocess.Popen(
            python_cmd(*args), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def acked(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for f in sorted((self.root / "workload").glob("acked-*.jsonl")):
            out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        return out

    def segment_batches(self, broker_id: int, topic: str, partition: int) -> dict[int, tuple[int, int]]:
        directory = Path(self.info.broker(broker_id).data_dir) / f"{topic}-{partition}"
        data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
        return {h.base_offset: (h.last_offset, h.crc) for _, h in iter_batches(data)}

    def assert_no_acked_batch_lost(self, topic: str, partitions: int) -> int:
        """Every acks=all acknowledged batch is at its offset with its CRC on every replica."""
        logs = {
            (b.id, p): self.segment_batches(b.id, topic, p)
            for b in self.info.brokers
            for p in range(partitions)
        }
        n = 0
        for ack in self.acked():
            if ack["acks"] != -1 or ack["topic"] != topic:
                continue
            for b in self.info.brokers:
                got = logs[(b.id, ack["partition"])].get(ack["base_offset"])
                assert got == (ack["last_offset"], ack["crc"]), (
                    f"acked batch {ack} lost on broker {b.id}: {got}"
                )
            n += 1
        return n

    def stop(self) -> None:
        try:
            info = self.info
        except Exception:
            return
        # The test is over and nothing reads the data after it: every process is killed at once (stopping
        # them cleanly one after another cost about 5 s per test; `cluster down` has tests of its own).
        kill_cluster(info)


def cluster_up(
    root: Path,
    brokers: int = 3,
    settings: tuple[str, ...] = FAST,
    *,
    secure: bool = False,
    controllers: int = 1,
) -> Iterator[Cluster]:
    """`isrsim cluster up` under ``root``. One controller unless told otherwise: the tests that are not about
    the controller quorum do not pay for starting three (the command's default)."""
    cluster = Cluster(root)
    args = ["cluster", "up", "--brokers", str(brokers), "--data-dir", str(root), "--base-port", "0"]
    args += ["--controllers", str(controllers)]
    if secure:
        args.append("--secure")
    for s in settings:
        args += ["--override", s]
    try:
        cluster.up_output = run_cli(*args, timeout=90).stdout
        yield cluster
    finally:
        cluster.stop()
