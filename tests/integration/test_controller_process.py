"""The controller as a real process: started with ``controller start`` on an OS-assigned port (found in
its ``controller_started`` journal line), a fake broker registers and heartbeats over TCP, gets the
LEADER_AND_ISR of a new topic, stops heartbeating and is fenced; SIGTERM stops the controller cleanly and
a restart bumps the controller epoch."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from kit import processes
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool
from tests.integration.harness import REPO_ROOT, async_wait_until, request

pytestmark = pytest.mark.integration

SESSION_MS = 1500


class ControllerProcess(processes.ControllerProcess):
    """The kit's controller process, with its output beside its directory."""

    def __init__(self, directory: Path) -> None:
        super().__init__(
            directory,
            log_path=directory.parent / f"{directory.name}.stderr",
            overrides={"broker.session.timeout.ms": str(SESSION_MS), "cluster.id": "it"},
            cwd=REPO_ROOT,
        )

    def start(self, timeout: float = 20.0) -> int:
        return super().start(timeout)

    def stop(self) -> int:
        return self.kill(signal.SIGTERM, 15)


@pytest.fixture
def controller_process(tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path / "controller")
    try:
        yield proc
    finally:
        proc.close()


class FakeBroker:
    def __init__(self) -> None:
        self.received: list[tuple[int, dict[str, Any]]] = []

    async def handle(self, request: Request) -> None:
        self.received.append((request.api_key, request.body))
        request.complete({"error_code": 0, "partition_errors": []})

    def leader_and_isr(self) -> list[dict[str, Any]]:
        return [
            p
            for key, body in self.received
            if key == ApiKeys.LEADER_AND_ISR
            for t in body["topic_states"]
            for p in t["partition_states"]
        ]


async def test_controller_process(controller_process: ControllerProcess) -> None:
    c = controller_process
    c.start()
    assert c.events("controller_started")[0]["controller_epoch"] == 1
    described = await request(c.host, c.port, ApiKeys.DESCRIBE_CLUSTER, {})
    assert (described["cluster_id"], described["controller_id"], described["brokers"]) == ("it", 1000, [])

    fake = FakeBroker()
    channel = RequestChannel(100)
    supported = {
        int(k): (0, 0) for k in (ApiKeys.LEADER_AND_ISR, ApiKeys.UPDATE_METADATA, ApiKeys.STOP_REPLICA)
    }
    server = SocketServer(
        host="127.0.0.1", port=0, channel=channel, max_request_bytes=1 << 20, supported=supported, name="fake"
    )
    async with trio.open_nursery() as nursery:
        broker_port = await nursery.start(server.serve)
        nursery.start_soon(RequestHandlerPool(channel, fake.handle, 2, "fake").run)

        reg = await request(
            c.host,
            c.port,
            ApiKeys.BROKER_REGISTRATION,
            {
                "broker_id": 1,
                "cluster_id": "it",
                "incarnation_id": "incarnation-1",
                "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": broker_port}],
            },
        )
        assert reg["error_code"] == 0 and reg["broker_epoch"] >= 1
        epoch = reg["broker_epoch"]
        wrong = await request(
            c.host, c.port, ApiKeys.BROKER_HEARTBEAT, {"broker_id": 1, "broker_epoch": epoch + 5}
        )
        assert wrong["error_code"] == Errors.STALE_BROKER_EPOCH
        beat = await request(
            c.host, c.port, ApiKeys.BROKER_HEARTBEAT, {"broker_id": 1, "broker_epoch": epoch}
        )
        assert beat["error_code"] == 0 and beat["is_fenced"] is False
        await async_wait_until(
            lambda: any(k == ApiKeys.UPDATE_METADATA for k, _ in fake.received), message="UPDATE_METADATA"
        )

        created = await request(
            c.host,
            c.port,
            ApiKeys.CREATE_TOPICS,
            {"topics": [{"name": "t", "num_partitions": 2, "replication_factor": 1}], "timeout_ms": 5000},
        )
        [made] = created["topics"]
        assert (made["name"], made["error_code"], made["error_message"]) == ("t", 0, None)
        # what was made, as Kafka's CreateTopics v5+ answers (KIP-525)
        assert (made["num_partitions"], made["replication_factor"]) == (2, 1)
        assert {"name": "compression.type", "value": "producer"}.items() <= next(
            c for c in made["configs"] if c["name"] == "compression.type"
        ).items()
        states = fake.leader_and_isr()  # answered once the broker had it
        assert sorted(p["partition_index"] for p in states) == [0, 1]
        assert all(p["leader"] == 1 and p["isr"] == [1] and p["is_new"] for p in states)
        bad = await request(
            c.host,
            c.port,
            ApiKeys.CREATE_TOPICS,
            {"topics": [{"name": "u", "num_partitions": 1, "replication_factor": 2}], "timeout_ms": 0},
        )
        assert bad["topics"][0]["error_code"] == Errors.INVALID_REPLICATION_FACTOR

        # Silence: the broker is fenced after broker.session.timeout.ms and its partitions go offline.
        with trio.fail_after(20):
            await async_wait_until(
                lambda: c.events("broker_fenced"), timeout=20, message="broker_fenced in the journal"
            )
        fenced = c.events("broker_fenced")[0]
        assert (fenced["broker_id"], fenced["reason"], fenced["broker_epoch"]) == (
            1,
            "session_timeout",
            epoch,
        )
        offline = [e for e in c.events("leader_elected") if e["leader_id"] == -1]
        assert sorted(e["partition"] for e in offline) == [0, 1]
        assert all(e["isr"] == [1] and e["unclean"] is False for e in offline)
        md = await request(c.host, c.port, ApiKeys.METADATA, {"topics": None})
        assert md["brokers"] == []
        assert {p["error_code"] for p in md["topics"][0]["partitions"]} == {Errors.LEADER_NOT_AVAILABLE}
        nursery.cancel_scope.cancel()

    assert c.stop() == 0
    names = [e["event"] for e in c.events()]
    assert names[0] == "controller_started" and names[-1] == "controller_stopped"
    for name in ("broker_registered", "broker_unfenced", "topic_created", "leader_elected", "broker_fenced"):
        assert name in names
    assert all(e["controller_id"] == 1000 and isinstance(e["ts_ms"], int) for e in c.events())
    state = json.loads((c.directory / "cluster-metadata.json").read_text())
    assert [t["name"] for t in state["topics"]] == ["t"]

    c.start()
    assert [e["controller_epoch"] for e in c.events("controller_started")] == [1, 2]
    described = await request(c.host, c.port, ApiKeys.DESCRIBE_CLUSTER, {})
    assert [(b["broker_id"], b["fenced"]) for b in described["brokers"]] == [(1, True)]
    assert c.stop() == 0
