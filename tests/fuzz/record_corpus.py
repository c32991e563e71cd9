"""Records the fuzzer's seed corpus: the Kafka request frames real clients send (kafka-python, confluent-kafka
and kcat), written one frame per file under ``tests/fuzz/corpus/`` (docs/fuzzing.md).

A one-broker cluster is made with the kit; its broker advertises the address of a recording TCP proxy in
front of it, so every connection a client opens (the bootstrap one and those to the leader and the
coordinator) passes through the proxy. The proxy keeps each Kafka-encoded request frame it forwards; after
the clients ran, at most ``PER_KEY`` frames per (api key, version, client) are written, the smallest first.

    .venv/bin/python -m tests.fuzz.record_corpus            # rewrites tests/fuzz/corpus/
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kit.local_cluster import create_layout, kill_cluster, start_brokers, start_controllers
from kit.ports import free_ports
from protocol.framing import is_kafka_frame

CORPUS = Path(__file__).parent / "corpus"
PER_KEY = 2
MAX_FRAME_BYTES = 16 * 1024  # seeds stay small: a larger frame (a big produce) is not kept


class RecordingProxy:
    """Forwards 127.0.0.1:``port`` to the broker both ways and keeps the client-to-broker frames."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.target: tuple[str, int] | None = None
        self.frames: list[bytes] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.target is None:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        buf = bytearray()
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if not record:
                    continue
                buf += data
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">I", buf, 0)
                    if len(buf) < 4 + n:
                        break
                    frame = bytes(buf[: 4 + n])
                    del buf[: 4 + n]
                    if n >= 10 and is_kafka_frame(frame[4:]):
                        with self._lock:
                            self.frames.append(frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._server.close()


def _try(action: Callable[..., object], *args: object) -> None:
    """One client call whose failure (an API isrsim does not serve, a refusal) does not end the recording:
    the request was sent, which is what is kept."""
    try:
        action(*args)
    except Exception as exc:
        print(f"  {getattr(action, '__name__', action)}: {type(exc).__name__}: {exc}"[:160])


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin", request_timeout_ms=10000)
    try:
        admin.create_topics(
            [NewTopic("seed-a", 2, 1), NewTopic("seed-b", 1, 1, topic_configs={"min.insync.replicas": "1"})]
        )
        admin.create_partitions({"seed-b": NewPartitions(3)})
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "seed-a")])
        admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")])
        admin.list_topics()
        admin.describe_cluster()
        _try(admin.list_groups)
        _try(admin.describe_topics, ["seed-a"])
        _try(admin.describe_metadata_quorum)
        _try(admin.list_partition_offsets, {})
    finally:
        admin.close()
    for codec in (None, "gzip", "lz4", "zstd", "snappy"):
        producer = KafkaProducer(
            bootstrap_servers=bootstrap, client_id=f"kp-producer-{codec}", acks="all", compression_type=codec
        )
        for i in range(3):
            producer.send("seed-a", key=f"k{i}".encode(), value=f"value {i} {codec}".encode() * 3)
        producer.flush(10)
        producer.close()
    consumer = KafkaConsumer(
        "seed-a",
        bootstrap_servers=bootstrap,
        client_id="kp-consumer",
        group_id="seed-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=4000,
    )
    for _ in consumer:
        pass
    consumer.commit()
    consumer.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin2", request_timeout_ms=10000)
    try:
        _try(admin.describe_groups, ["seed-group"])
        _try(admin.list_group_offsets, "seed-group")
        _try(admin.delete_groups, ["seed-group"])
        _try(admin.delete_topics, ["seed-b"])
    finally:
        admin.close()
    # a SASL handshake on a listener that has none: refused, but the client sent it
    with contextlib.suppress(Exception):
        KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="kp-sasl",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="u",
            sasl_plain_password="p",
            max_block_ms=2000,
        ).close()


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "rd-admin"})
    for f in admin.create_topics([NewTopic("seed-c", 2, 1)]).values():
        f.result(10)
    for f in admin.create_partitions([NewPartitions("seed-c", 3)]).values():
        f.result(10)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "rd-producer", "acks": "all", "linger.ms": 5}
    )
    for i in range(5):
        producer.produce("seed-c", key=f"k{i}", value=f"rd value {i}")
    producer.flush(10)
    idem = Producer({"bootstrap.servers": bootstrap, "client.id": "rd-idem", "enable.idempotence": True})
    idem.produce("seed-c", value=b"idempotent")
    idem.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "rd-consumer",
            "group.id": "rd-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["seed-c"])
    deadline = time.monotonic() + 15
    got = 0
    while time.monotonic() < deadline and got < 6:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    for f in admin.delete_topics(["seed-c"]).values():
        f.result(10)


def _kcat(bootstrap: str) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        return
    subprocess.run([kcat, "-b", bootstrap, "-L"], capture_output=True, timeout=30, check=False)
    subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", "seed-a", "-X", "client.id=kcat-producer"],
        input=b"one\ntwo\n",
        capture_output=True,
        timeout=30,
        check=False,
    )
    subprocess.run(
        [
            kcat,
            "-b",
            bootstrap,
            "-C",
            "-t",
            "seed-a",
            "-o",
            "beginning",
            "-e",
            "-X",
            "client.id=kcat-consumer",
        ],
        capture_output=True,
        timeout=30,
        check=False,
    )


def _select(frames: list[bytes]) -> dict[str, bytes]:
    """At most PER_KEY frames per (api key, version, client kind), the smallest first, named for what they
    are (produce requests per client id: one producer per codec)."""
    groups: dict[tuple[int, int, str], list[bytes]] = {}
    for frame in frames:
        if len(frame) > MAX_FRAME_BYTES:
            continue
        api_key, version = struct.unpack_from(">hh", frame, 4)
        (n,) = struct.unpack_from(">h", frame, 12)
        raw = frame[14 : 14 + max(n, 0)].decode("utf-8", "replace")
        client = "".join(c if c.isalnum() or c == "-" else "_" for c in raw) or "anon"
        if api_key != 0:  # produce requests are kept per producer (one per codec), the rest per client kind
            client = client.split("-")[0]
        groups.setdefault((api_key, version, client), []).append(frame)
    out: dict[str, bytes] = {}
    for (api_key, version, client), group in sorted(groups.items()):
        unique = sorted(set(group), key=lambda f: (len(f), f))
        for i, frame in enumerate(unique[:PER_KEY]):
            out[f"{api_key:02d}-v{version}-{client}-{i}.bin"] = frame
    return out


def record(out: Path, clients: list[Callable[[str], None]]) -> dict[str, bytes]:
    with tempfile.TemporaryDirectory(prefix="isrsim-corpus-") as tmp:
        root = Path(tmp) / "root"
        info = create_layout(root, 1, 0, ("min.insync.replicas=1",), controllers=1)
        proxy_port, broker_port = free_ports(2)
        proxy = RecordingProxy(proxy_port)
        b = info.brokers[0]
        b.port = broker_port
        config = Path(b.config)
        lines = [
            f"listeners=PLAINTEXT://127.0.0.1:{broker_port}" if line.startswith("listeners=") else line
            for line in config.read_text(encoding="utf-8").splitlines()
        ]
        lines.append(f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}")
        config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        proxy.target = ("127.0.0.1", broker_port)
        try:
            start_controllers(info)
            info.save()
            start_brokers(info)
            info.save()
            bootstrap = f"127.0.0.1:{proxy_port}"
            for client in clients:
                _try(client, bootstrap)
        finally:
            kill_cluster(info)
            proxy.close()
        with proxy._lock:
            frames = list(proxy.frames)
    selected = _select(frames)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, frame in selected.items():
        (out / name).write_bytes(frame)
    return selected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    args = parser.parse_args()
    selected = record(args.out, [_kafka_python, _confluent, _kcat])
    total = sum(len(f) for f in selected.values())
    print(f"{len(selected)} frames, {total} bytes, in {args.out}")


if __name__ == "__main__":
    main()
