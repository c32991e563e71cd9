"""Replication between real broker processes, with leadership given by LEADER_AND_ISR from the test (the
brokers are unmanaged: no controller)."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import threading
from pathlib import Path

import msgpack
import pytest

from protocol.records import iter_batches
from tests.integration.harness import BrokerLauncher, BrokerProcess, events, wait_until
from tests.integration.replication_support import (
    acked_lines,
    describe,
    describe_full,
    leader_and_isr_body,
    segment_bytes,
    send_leader_and_isr,
    start_producer,
    wait_converged,
)

pytestmark = pytest.mark.integration


def _batches_by_base(data: bytes) -> dict[int, tuple[int, int]]:
    return {h.base_offset: (h.last_offset, h.crc) for _, h in iter_batches(data)}


def _assert_acked_present(journal: Path, brokers: list[BrokerProcess], topic: str) -> int:
    """Every acknowledged batch is at its offset with its CRC on every replica. Returns how many."""
    import json

    logs = {
        (b.broker_id, p): _batches_by_base(segment_bytes(b, topic, p))
        for b in brokers
        for p in {
            json.loads(line)["partition"]
            for f in journal.glob("acked-*.jsonl")
            for line in f.read_text().splitlines()
        }
    }
    checked = 0
    for f in journal.glob("acked-*.jsonl"):
        for line in f.read_text().splitlines():
            ack = json.loads(line)
            for b in brokers:
                batch = logs[(b.broker_id, ack["partition"])].get(ack["base_offset"])
                assert batch == (ack["last_offset"], ack["crc"]), (
                    f"acked batch {ack} missing or different on broker {b.broker_id}: {batch}"
                )
            checked += 1
    return checked


def test_old_leader_truncates_its_extra_records_by_leader_epoch(
    broker_launcher: BrokerLauncher, tmp_path: Path
) -> None:
    """KIP-101: the old leader comes back with records the new leader never had; it asks the new leader for
    the end offset of its latest epoch, truncates there, and then holds exactly the new leader's log."""
    b1, b2, b3 = broker_launcher.start_many([1, 2, 3], {"min.insync.replicas": "2"})
    brokers = [b1, b2, b3]
    send_leader_and_isr(
        brokers, leader_and_isr_body(brokers, "t", [0], leader=1, leader_epoch=1, isr=[1, 2, 3])
    )
    journal = tmp_path / "workload"
    prod = start_producer("t", 1000, [b1], journal)
    assert prod.wait(60) == 0, prod.stderr.read() if prod.stderr else ""

    # The followers stop; the leader takes records that only it will ever have (acks=1).
    b2.pause()
    b3.pause()
    prod = start_producer("t", 500, [b1], tmp_path / "extra", acks="1")
    assert prod.wait(60) == 0
    extra_leo = describe(b1)[("t", 0)]["log_end_offset"]
    b1.kill(signal.SIGKILL)
    b2.resume()
    b3.resume()

    # Broker 2 becomes leader in epoch 2 and takes more acknowledged records.
    body = leader_and_isr_body(brokers, "t", [0], leader=2, leader_epoch=2, isr=[2, 3], live=[b2, b3])
    send_leader_and_isr([b2, b3], body)
    prod = start_producer("t", 700, [b2, b3], journal)
    assert prod.wait(60) == 0

    # The old leader returns as a follower.
    b1.restart()
    send_leader_and_isr([b1], leader_and_isr_body(brokers, "t", [0], leader=2, leader_epoch=2, isr=[2, 3]))
    wait_converged(brokers, "t", [0])

    epoch2_start = next(
        e["start_offset"] for e in events(b2.events_path, "epoch_assigned") if e["leader_epoch"] == 2
    )
    truncations = events(b1.events_path, "truncated")
    assert truncations, "the old leader never truncated"
    first = truncations[0]
    assert first["truncate_to"] == epoch2_start
    assert first["log_end_offset_before"] == extra_leo > epoch2_start
    assert "leader epoch 1 ends at" in first["reason"]
    assert segment_bytes(b1, "t", 0) == segment_bytes(b2, "t", 0) == segment_bytes(b3, "t", 0)
    assert _assert_acked_present(journal, brokers, "t") == 5 + 4  # batches of at most 200 records
    # The returning replica caught up, so the leader took it back into the ISR.
    wait_until(lambda: sorted(describe(b2)[("t", 0)]["isr"]) == [1, 2, 3], message="broker 1 back in the ISR")


def test_acks_all_survives_two_leader_changes(broker_launcher: BrokerLauncher, tmp_path: Path) -> None:
    brokers = broker_launcher.start_many([1, 2, 3], {"min.insync.replicas": "2"})
    b1, b2, b3 = brokers
    parts = [0, 1]
    send_leader_and_isr(
        brokers, leader_and_isr_body(brokers, "r", parts, leader=1, leader_epoch=1, isr=[1, 2, 3])
    )
    journal = tmp_path / "workload"
    prod = start_producer("r", 100_000, brokers, journal, extra=["--rate", "40000"])
    try:
        wait_until(lambda: acked_lines(journal) >= 100, timeout=60, message="a quarter acknowledged")
        body = leader_and_isr_body(brokers, "r", parts, leader=2, leader_epoch=2, isr=[1, 2, 3])
        send_leader_and_isr([b2, b1, b3], body)
        wait_until(lambda: acked_lines(journal) >= 300, timeout=60, message="60% acknowledged")
        body = leader_and_isr_body(brokers, "r", parts, leader=3, leader_epoch=3, isr=[1, 2, 3])
        send_leader_and_isr([b3, b1, b2], body)
        assert prod.wait(120) == 0, prod.stderr.read() if prod.stderr else ""
    finally:
        if prod.poll() is None:
            prod.kill()
    final = wait_converged(brokers, "r", parts)
    assert sum(leo for leo, _ in final.values()) >= 100_000
    for p in parts:
        assert segment_bytes(b1, "r", p) == segment_bytes(b2, "r", p) == segment_bytes(b3, "r", p)
    assert _assert_acked_present(journal, brokers, "r") >= 500
    # Each leader change was seen: epochs 2 and 3 were assigned by their leaders.
    assert [e["leader_epoch"] for e in events(b2.events_path, "epoch_assigned")] == [2, 2]
    assert [e["leader_epoch"] for e in events(b3.events_path, "epoch_assigned")] == [3, 3]


def test_stopped_follower_leaves_isr_and_rejoins_after_catching_up(
    broker_launcher: BrokerLauncher, tmp_path: Path
) -> None:
    overrides = {"min.insync.replicas": "2", "replica.lag.time.max.ms": "1000"}
    brokers = broker_launcher.start_many([1, 2, 3], overrides)
    b1, _b2, b3 = brokers
    send_leader_and_isr(
        brokers, leader_and_isr_body(brokers, "s", [0], leader=1, leader_epoch=1, isr=[1, 2, 3])
    )
    b3.stop()
    # While nothing is written, a stopped follower whose LEO equals the leader's stays "caught up" (as in
    # Kafka). New records make it lag; acks=all waits until the leader drops it from the ISR.
    prod = start_producer("s", 20_000, [b1], tmp_path / "wl")
    assert prod.wait(60) == 0
    assert describe(b1)[("s", 0)]["isr"] == [1, 2]
    shrink = [e for e in events(b1.events_path, "isr_changed") if e["reason"] == "follower_lagging"]
    assert shrink and shrink[0]["isr"] == [1, 2]
    b3.restart()
    send_leader_and_isr([b3], leader_and_isr_body(brokers, "s", [0], leader=1, leader_epoch=1, isr=[1, 2]))
    wait_until(
        lambda: sorted(describe(b1)[("s", 0)]["isr"]) == [1, 2, 3], timeout=15, message="broker 3 to rejoin"
    )
    expand = [e for e in events(b1.events_path, "isr_changed") if e["reason"] == "follower_caught_up"]
    assert expand and sorted(expand[-1]["isr"]) == [1, 2, 3]
    assert expand[-1]["log_end_offset"] >= 20_000
    wait_converged(brokers, "s", [0])
    assert segment_bytes(b3, "s", 0) == segment_bytes(b1, "s", 0)


class FrameCountingProxy:
    """A TCP proxy in front of a leader that records (api_key, session_epoch, bytes) of each request frame
    the follower sends: real request sizes, measured on the wire."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.requests: list[tuple[int, int, int]] = []
        self._sockets: list[socket.socket] = [self.listener]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, parse: bool) -> None:
        buf = b""
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
                if parse:
                    buf += chunk
                    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                        n = struct.unpack(">I", buf[:4])[0]
                        msg = msgpack.unpackb(buf[4 : 4 + n], raw=False)
                        self.requests.append((msg["api_key"], msg["body"].get("session_epoch", -99), n + 4))
                        buf = buf[4 + n :]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        for s in self._sockets:
            s.close()


def test_idle_fetches_with_1000_partitions_use_incremental_sessions(broker_launcher: BrokerLauncher) -> None:
    b1 = broker_launcher.start(1)
    b2 = broker_launcher.start(2, {"replica.fetch.wait.max.ms": "100"})
    proxy = FrameCountingProxy((b1.host, b1.port))
    try:
        parts = list(range(1000))
        body = leader_and_isr_body([b1, b2], "idle", parts, leader=1, leader_epoch=1, isr=[1, 2])
        send_leader_and_isr([b1], body)
        follower_body = leader_and_isr_body(
            [b1, b2], "idle", parts, leader=1, leader_epoch=1, isr=[1, 2], leader_address=proxy.address
        )
        send_leader_and_isr([b2], follower_body)
        fetches = wait_until(
            lambda: (f := [r for r in proxy.requests if r[0] == 1]) and len(f) >= 8 and f,
            timeout=30,
            message="eight FETCH requests through the proxy",
        )
        full = fetches[0]
        assert full[1] == 0, f"the first FETCH opens a session (epoch 0): {full}"
        incremental = fetches[2:8]
        assert all(epoch >= 1 for _, epoch, _ in incremental), fetches[:8]
        biggest = max(size for _, _, size in incremental)
        assert biggest <= 0.02 * full[2], f"idle incremental FETCH {biggest} B vs full {full[2]} B"
        sessions = describe_full(b1)["fetch_sessions"]
        assert sessions["count"] == 1 and sessions["partitions_cached"] == 1000
    finally:
        proxy.close()
