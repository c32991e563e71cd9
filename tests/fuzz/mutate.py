"""The fuzzer's inputs (docs/fuzzing.md): mutations of the recorded corpus, and schema-valid requests with
extreme values. Pure: a seeded ``random.Random`` in, bytes out; nothing here opens a socket.

An :class:`Input` is the bytes to write on a connection and whether the connection is then half-closed
(a length prefix that promises more bytes than follow: the broker waits for them, so the sender ends the
stream instead of waiting for an answer that cannot come).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol import kafka_codec
from protocol.admin_bounds import MAX_PARTITIONS_PER_BATCH
from protocol.api_keys import ApiKeys
from protocol.framing import InvalidFrame

CORPUS = Path(__file__).parent / "corpus"
# The largest frame a broker accepts (socket.request.max.bytes' default); a lying prefix goes up to it.
MAX_REQUEST_BYTES = 104_857_600
# Topics and groups the stateful requests use: a small pool, so that a long run creates and deletes the
# same few topics instead of thousands (the workload's topic is never among them).
TOPIC_POOL = tuple(f"fz-{i}" for i in range(8))
GROUP_POOL = tuple(f"fz-group-{i}" for i in range(4))
# The most partitions a forwarded CreateTopics / CreatePartitions of the stateful mode asks for (see
# docs/fuzzing.md: the controller's own bounds are another change's).
ADMIN_PARTITIONS_BOUND = 64
EXTREME_BYTES_MAX = 256 * 1024
# A schema-valid request with more entries than this (topics, partitions, keys, in all) is heavy, and is
# sent HEAVY_SHARE as often as the others.
HEAVY_ENTRIES = 1000
HEAVY_SHARE = 0.1

INT16 = (0, 1, -1, 0x7FFF, -0x8000, 0x7FFE, 0x100)
INT32 = (0, 1, -1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0x10000, 1_000_000)
INT64 = (0, -1, -2, -3, 2**63 - 1, -(2**63), 2**31, 1 << 40)
# Unsigned varints: the largest 32-bit one, an overlong one, one that never ends, and zigzag extremes.
VARINTS = (
    b"\xff\xff\xff\xff\x0f",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"\x80" * 12,
    b"\xfe\xff\xff\xff\x0f",
    b"\x00",
    b"\x01",
)


@dataclass(frozen=True, slots=True)
class Input:
    data: bytes
    kind: str  # the mutation or generator that made it (counted in the run's figures)
    eof: bool = False  # half-close the connection after writing
    heavy: bool = False  # a schema-valid request with more than HEAVY_ENTRIES entries (sent less often)

    @property
    def terminal(self) -> bool:
        """Ends its connection's batch (docs/fuzzing.md): its framing lies (what follows it on the
        connection would be read as part of it), or it names an API or version the broker is expected to
        refuse by closing the connection. Every other input is one honest frame, pipelined with others."""
        return self.eof or self.kind in TERMINAL_KINDS


def load_corpus(directory: Path = CORPUS) -> list[bytes]:
    frames = [p.read_bytes() for p in sorted(directory.glob("*.bin"))]
    if not frames:
        raise FileNotFoundError(f"no seed frames in {directory}: python -m tests.fuzz.record_corpus")
    return frames


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _payload(frame: bytes) -> bytearray:
    return bytearray(frame[4:])


def _pos(rng: random.Random, payload: bytearray, start: int = 0) -> int:
    return rng.randrange(start, max(start + 1, len(payload)))


# ------------------------------------------------------------------ mutations of one seed (honest length)


def bit_flip(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        i = _pos(rng, p)
        p[i] ^= 1 << rng.randrange(8)
    return Input(_frame(bytes(p)), "bit_flip")


def body_flip(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """Bit flips past the fixed header, so that the body is what changes."""
    p = _payload(seed)
    for _ in range(rng.choice((1, 2, 3))):
        i = _pos(rng, p, min(len(p) - 1, 10))
        p[i] ^= 1 << rng.randrange(8)
    return Input(_frame(bytes(p)), "body_flip")


def interesting_bytes(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed)
    for _ in range(rng.choice((1, 2, 4))):
        p[_pos(rng, p)] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE))
    return Input(_frame(bytes(p)), "interesting_bytes")


def huge_int(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """An int16 / int32 / int64 anywhere in the body (lengths, counts, sizes) set to an extreme value."""
    p = _payload(seed)
    width, values, fmt = rng.choice(((2, INT16, ">h"), (4, INT32, ">i"), (8, INT64, ">q")))
    i = _pos(rng, p, 4)
    if i + width <= len(p):
        struct.pack_into(fmt, p, i, rng.choice(values))
    return Input(_frame(bytes(p)), "huge_int")


def huge_varint(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """A huge, overlong or endless varint over (or into) the body: compact lengths, record fields."""
    p = _payload(seed)
    i = _pos(rng, p, 10)
    v = rng.choice(VARINTS)
    if rng.random() < 0.5:
        p[i : i + len(v)] = v
    else:
        p[i:i] = v
    return Input(_frame(bytes(p)), "huge_varint")


def truncate(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed)
    return Input(_frame(bytes(p[: rng.randrange(0, len(p))])), "truncate")


def extend(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed) + rng.randbytes(rng.choice((1, 7, 64, 1000)))
    return Input(_frame(bytes(p)), "extend")


def cut_range(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed)
    i = _pos(rng, p)
    del p[i : i + rng.randrange(1, 32)]
    return Input(_frame(bytes(p)), "cut_range")


def wrong_api(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """Another API's key over this body (the body then reads as that API's), or a key nothing serves."""
    p = _payload(seed)
    key = rng.choice((*[int(k) for k in ApiKeys if int(k) < 1000], -1, 99, 1000, 1001, 1002, 32767))
    struct.pack_into(">h", p, 0, key)
    return Input(_frame(bytes(p)), "wrong_api")


def wrong_version(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    p = _payload(seed)
    (version,) = struct.unpack_from(">h", p, 2)
    struct.pack_into(">h", p, 2, rng.choice((-1, 0, version - 1, version + 1, version + 5, 32767)))
    return Input(_frame(bytes(p)), "wrong_version")


def splice(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """The head of one request and the tail of another."""
    a, b = _payload(seed), _payload(rng.choice(corpus))
    return Input(_frame(bytes(a[: _pos(rng, a)] + b[_pos(rng, b) :])), "splice")


def header_swap(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """This request's header (api key, version, correlation id) on another request's body."""
    a, b = _payload(seed), _payload(rng.choice(corpus))
    return Input(_frame(bytes(a[:8] + b[8:])), "header_swap")


# ------------------------------------------------------------------ framing that lies


def short_prefix(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """A length prefix shorter than the body: the rest of the body is read as the next frame."""
    p = _payload(seed)
    n = rng.randrange(0, len(p))
    return Input(struct.pack(">I", n) + bytes(p), "short_prefix")


def long_prefix(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """A length prefix longer than the body, up to socket.request.max.bytes and past it."""
    p = _payload(seed)
    n = rng.choice((len(p) + 1, len(p) + 1000, 1 << 20, MAX_REQUEST_BYTES, MAX_REQUEST_BYTES + 1, 0xFFFFFFFF))
    return Input(struct.pack(">I", n) + bytes(p), "long_prefix", eof=True)


def tiny_frames(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """Frames too short for any header: empty, one byte, a header cut in the middle."""
    n = rng.choice((0, 1, 2, 5, 9))
    return Input(_frame(_payload(seed)[:n]) + seed, "tiny_frames")


def pipelined(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    """Several requests in one write, one of them mutated."""
    frames = [rng.choice(corpus) for _ in range(rng.randrange(2, 6))]
    i = rng.randrange(len(frames))
    frames[i] = rng.choice(SEED_MUTATIONS)(rng, frames[i], corpus).data
    return Input(b"".join(frames), "pipelined")


def random_bytes(rng: random.Random, seed: bytes, corpus: list[bytes]) -> Input:
    return Input(rng.randbytes(rng.choice((1, 4, 14, 100, 4096))), "random_bytes", eof=True)


SEED_MUTATIONS: tuple[Callable[[random.Random, bytes, list[bytes]], Input], ...] = (
    bit_flip,
    body_flip,
    interesting_bytes,
    huge_int,
    huge_varint,
    truncate,
    extend,
    cut_range,
    wrong_api,
    wrong_version,
    splice,
    header_swap,
)
FRAMING_MUTATIONS: tuple[Callable[[random.Random, bytes, list[bytes]], Input], ...] = (
    short_prefix,
    long_prefix,
    tiny_frames,
    pipelined,
    random_bytes,
)


# The kinds that end a batch (``Input.terminal``): framing that lies, and another API key or version.
TERMINAL_KINDS = frozenset({m.__name__ for m in FRAMING_MUTATIONS} | {"wrong_api", "wrong_version"})


# ------------------------------------------------------------------ schema-valid requests, extreme values


def _name(rng: random.Random) -> str:
    return rng.choice(
        (
            *TOPIC_POOL,
            "",
            ".",
            "..",
            "a" * 249,
            "a" * 250,
            "x" * 20_000,
            "bad name",
            "bad/name",
            "__consumer_offsets",
            "__cluster_metadata",
            "fz.0",
            "fz_0",
            "\u00e9\u00e8",
        )
    )


def _pool_topic(rng: random.Random) -> str:
    return rng.choice(TOPIC_POOL)


def _many(rng: random.Random, make: Callable[[], Any], *, most: int = 2000) -> list[Any]:
    n = rng.choice((0, 1, 2, 10, 100, most))
    return [make() for _ in range(n)]


def _produce(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    records = rng.choice((None, b"", rng.randbytes(rng.choice((1, 61, 200)))))
    return (
        ApiKeys.PRODUCE,
        rng.choice((3, 7, 9)),
        {
            "acks": rng.choice((-1, 0, 1, 2, -2, 32767)),
            "timeout_ms": rng.choice(INT32),
            "topic_data": [
                {
                    "name": rng.choice((_pool_topic(rng), _name(rng), "seed-a")),
                    "partition_data": [
                        {"index": rng.choice(INT32), "records": records}
                        for _ in range(rng.choice((0, 1, 3, 500)))
                    ],
                }
                for _ in range(rng.choice((0, 1, 2, 50)))
            ],
        },
    )


def _fetch(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.FETCH,
        rng.choice((4, 7, 11, 12)),
        {
            "replica_id": rng.choice((-1, -1, 1, 1000, 2**31 - 1)),
            # Short waits only: a fetch that waits long is held by the broker (as Kafka does) and the run
            # would measure the purgatory, not the request path.
            "max_wait_ms": rng.choice((0, 1, 10, -1, -(2**31))),
            "min_bytes": rng.choice(INT32),
            "max_bytes": rng.choice(INT32),
            "isolation_level": rng.choice((0, 1, 2, -1, 127)),
            "session_id": rng.choice(INT32),
            "session_epoch": rng.choice(INT32),
            "topics": [
                {
                    "topic": rng.choice((_pool_topic(rng), "seed-a", _name(rng))),
                    "partitions": [
                        {
                            "partition": rng.choice(INT32),
                            "current_leader_epoch": rng.choice(INT32),
                            "fetch_offset": rng.choice(INT64),
                            "log_start_offset": rng.choice(INT64),
                            "partition_max_bytes": rng.choice(INT32),
                        }
                        for _ in range(rng.choice((0, 1, 3, 1000)))
                    ],
                }
                for _ in range(rng.choice((0, 1, 2, 20)))
            ],
            "forgotten_topics_data": [],
            "rack_id": rng.choice(("", "r" * 5000)),
        },
    )


def _list_offsets(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.LIST_OFFSETS,
        rng.choice((1, 4, 7)),
        {
            "replica_id": rng.choice((-1, -2, 1, 2**31 - 1)),
            "isolation_level": rng.choice((0, 1, -1, 100)),
            "topics": [
                {
                    "name": rng.choice((_pool_topic(rng), "seed-a", _name(rng))),
                    "partitions": [
                        {
                            "partition_index": rng.choice(INT32),
                            "current_leader_epoch": rng.choice(INT32),
                            "timestamp": rng.choice((*INT64, -4, -5)),
                        }
                        for _ in range(rng.choice((0, 1, 1000)))
                    ],
                }
                for _ in range(rng.choice((0, 1, 10)))
            ],
        },
    )


def _metadata(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.METADATA,
        rng.choice((4, 9, 12)),
        {
            "topics": rng.choice((None, [], [{"name": _name(rng)} for _ in range(rng.choice((1, 500)))])),
            # Auto-creation only of the pool's names: anything else would grow the cluster without end.
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": rng.random() < 0.5,
            "include_topic_authorized_operations": rng.random() < 0.5,
        },
    )


def _metadata_create(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.METADATA,
        12,
        {"topics": [{"name": _pool_topic(rng)}], "allow_auto_topic_creation": True},
    )


def _find_coordinator(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    key = rng.choice((*GROUP_POOL, "", "g" * 30_000, "\u00ff"))
    return (
        ApiKeys.FIND_COORDINATOR,
        rng.choice((2, 4)),
        {
            "key": key,
            "key_type": rng.choice((0, 1, 2, -1, 127)),
            "coordinator_keys": [key] * rng.choice((0, 1, 2, 1000)),
        },
    )


def _join_group(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.JOIN_GROUP,
        rng.choice((5, 7)),
        {
            "group_id": rng.choice((*GROUP_POOL, "", "g" * 5000)),
            # Short timeouts only: a JoinGroup waits for the rebalance, up to its rebalance timeout.
            "session_timeout_ms": rng.choice((0, -1, 1, 6000, 2**31 - 1)),
            "rebalance_timeout_ms": rng.choice((0, -1, 1, 10)),
            "member_id": rng.choice(("", "m" * 10_000, "unknown")),
            "group_instance_id": rng.choice((None, "", "static-1", "s" * 5000)),
            "protocol_type": rng.choice(("consumer", "", "x" * 1000)),
            "protocols": [
                {
                    "name": rng.choice(("range", "", "p" * 1000)),
                    "metadata": rng.randbytes(rng.choice((0, 30))),
                }
                for _ in range(rng.choice((0, 1, 2, 300)))
            ],
            "reason": rng.choice((None, "r" * 10_000)),
        },
    )


def _sync_group(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.SYNC_GROUP,
        rng.choice((3, 5)),
        {
            "group_id": rng.choice(GROUP_POOL),
            "generation_id": rng.choice(INT32),
            "member_id": rng.choice(("", "m")),
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [
                {"member_id": f"m{i}", "assignment": rng.randbytes(rng.choice((0, 100, 10_000)))}
                for i in range(rng.choice((0, 1, 100)))
            ],
        },
    )


def _offset_commit(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.OFFSET_COMMIT,
        rng.choice((2, 8)),
        {
            "group_id": rng.choice((*GROUP_POOL, "", "g" * 3000)),
            "generation_id_or_member_epoch": rng.choice((-1, *INT32)),
            "member_id": rng.choice(("", "m")),
            "group_instance_id": None,
            "retention_time_ms": rng.choice(INT64),
            "topics": [
                {
                    "name": rng.choice((_pool_topic(rng), "seed-a", _name(rng))),
                    "partitions": [
                        {
                            "partition_index": rng.choice(INT32),
                            "committed_offset": rng.choice(INT64),
                            "committed_leader_epoch": rng.choice(INT32),
                            "committed_metadata": rng.choice((None, "", "m" * 5000)),
                        }
                        for _ in range(rng.choice((0, 1, 200)))
                    ],
                }
                for _ in range(rng.choice((0, 1, 5)))
            ],
        },
    )


def _offset_fetch(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.OFFSET_FETCH,
        rng.choice((1, 7, 8)),
        {
            "group_id": rng.choice((*GROUP_POOL, "")),
            "topics": rng.choice(
                (None, [{"name": _name(rng), "partition_indexes": [rng.choice(INT32) for _ in range(100)]}])
            ),
            "groups": [
                {"group_id": rng.choice(GROUP_POOL), "topics": None} for _ in range(rng.choice((0, 1, 500)))
            ],
            "require_stable": rng.random() < 0.5,
        },
    )


def _create_topics(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    def topic() -> dict[str, Any]:
        assign = rng.random() < 0.2
        return {
            "name": rng.choice((_pool_topic(rng), _pool_topic(rng), _name(rng))),
            "num_partitions": -1 if assign else rng.choice((-1, 0, 1, 3, ADMIN_PARTITIONS_BOUND, -2)),
            "replication_factor": -1 if assign else rng.choice((-1, 0, 1, 3, 4, 32767, -2)),
            "assignments": [
                {
                    "partition_index": i,
                    "broker_ids": [rng.choice((1, 2, 3, 4, -1, 2**31 - 1)) for _ in range(3)],
                }
                for i in range(rng.choice((1, 2, ADMIN_PARTITIONS_BOUND)))
            ]
            if assign
            else [],
            "configs": {
                rng.choice(("min.insync.replicas", "compression.type", "bogus", "")): rng.choice(
                    ("1", "-1", "zstd", "x" * 1000, "99999999999")
                )
                for _ in range(rng.choice((0, 1, 3)))
            },
        }

    return (
        ApiKeys.CREATE_TOPICS,
        rng.choice((2, 5, 7)),
        {
            "topics": [topic() for _ in range(rng.choice((0, 1, 2, 8)))],
            "timeout_ms": rng.choice((0, -1, 1, 30000, 2**31 - 1)),
            "validate_only": rng.random() < 0.3,
        },
    )


def _create_partitions(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.CREATE_PARTITIONS,
        rng.choice((1, 3)),
        {
            "topics": [
                {
                    "name": rng.choice((_pool_topic(rng), _name(rng))),
                    "count": rng.choice((-1, 0, 1, 2, ADMIN_PARTITIONS_BOUND, -(2**31))),
                    "assignments": rng.choice(
                        (None, [], [{"broker_ids": [rng.choice((1, 2, 3, 9, -1))]} for _ in range(3)])
                    ),
                }
                for _ in range(rng.choice((0, 1, 3)))
            ],
            "timeout_ms": rng.choice((0, -1, 30000, 2**31 - 1)),
            "validate_only": rng.random() < 0.3,
        },
    )


def _delete_topics(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    names = [rng.choice((_pool_topic(rng), _name(rng))) for _ in range(rng.choice((0, 1, 3, 500)))]
    version = rng.choice((1, 4, 6))
    body: dict[str, Any] = {"timeout_ms": rng.choice((0, -1, 30000, 2**31 - 1))}
    if version >= 6:
        body["topics"] = [{"name": n, "topic_id": None} for n in names]
    else:
        body["topic_names"] = names
    return ApiKeys.DELETE_TOPICS, version, body


def _describe_configs(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.DESCRIBE_CONFIGS,
        rng.choice((1, 4)),
        {
            "resources": [
                {
                    "resource_type": rng.choice((2, 4, 0, -1, 8, 127)),
                    "resource_name": rng.choice((_pool_topic(rng), "1", "99", "", "-1", "x" * 5000)),
                    "configuration_keys": rng.choice((None, [], ["k" * 100] * 1000, ["min.insync.replicas"])),
                }
                for _ in range(rng.choice((0, 1, 3, 300)))
            ],
            "include_synonyms": rng.random() < 0.5,
            "include_documentation": rng.random() < 0.5,
        },
    )


def _api_versions(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return (
        ApiKeys.API_VERSIONS,
        3,
        {
            "client_software_name": rng.choice(("", "-", "x" * 30_000, "apache-kafka-java")),
            "client_software_version": rng.choice(("", "!", "9" * 10_000)),
        },
    )


def _sasl_handshake(rng: random.Random, corpus: list[bytes]) -> tuple[int, int, dict[str, Any]]:
    return ApiKeys.SASL_HANDSHAKE, rng.choice((0, 1)), {"mechanism": rng.choice(("PLAIN", "", "M" * 10_000))}


GENERATORS: tuple[Callable[[random.Random, list[bytes]], tuple[int, int, dict[str, Any]]], ...] = (
    _produce,
    _fetch,
    _list_offsets,
    _metadata,
    _metadata_create,
    _find_coordinator,
    _join_group,
    _sync_group,
    _offset_commit,
    _offset_fetch,
    _create_topics,
    _create_partitions,
    _delete_topics,
    _describe_configs,
    _api_versions,
    _sasl_handshake,
)


def _entries(value: Any) -> int:
    """How many list entries a request body holds, at every depth."""
    if isinstance(value, dict):
        return sum(_entries(v) for v in value.values())
    if isinstance(value, list):
        return len(value) + sum(_entries(v) for v in value)
    return 0


def extreme_request(rng: random.Random, corpus: list[bytes]) -> Input:
    """One schema-valid request with extreme but well-formed values (counts, sizes, timeouts, names)."""
    make = rng.choice(GENERATORS)
    while True:
        api_key, version, body = make(rng, corpus)
        correlation = rng.choice(INT32)
        client_id = rng.choice((None, "", "fuzz", "c" * 30_000))
        data = kafka_codec.encode_request(api_key, version, correlation, client_id, body)
        # Large counts nest (50 topics of 500 partitions): one request stays under EXTREME_BYTES_MAX, so a
        # run measures the request path rather than the bandwidth of the loopback.
        if len(data) <= EXTREME_BYTES_MAX:
            return Input(data, make.__name__[1:], heavy=_entries(body) > HEAVY_ENTRIES)


# ------------------------------------------------------------------ forwarded admin requests, bounded

# The most partitions (and replicas per partition) one forwarded CreateTopics / CreatePartitions may ask for
# in a run with bounded admin requests (the default): a mutation that asks for more (a bit flip in
# num_partitions) is not sent, unless it asks for more than Kafka's bound of one request
# (MAX_PARTITIONS_PER_BATCH), which the controller refuses before it allocates anything: those are sent.
# Requests in between are legal and only slow (thousands of partitions created): docs/fuzzing.md.
ADMIN_PARTITIONS_PER_REQUEST = 512
ADMIN_REPLICATION_MAX = 16
_ADMIN_KEYS = (int(ApiKeys.CREATE_TOPICS), int(ApiKeys.CREATE_PARTITIONS))


def _frames(data: bytes) -> Iterator[bytes]:
    """The complete frames' payloads in ``data``, as the broker splits them."""
    pos = 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + n > len(data):
            return
        yield data[pos + 4 : pos + 4 + n]
        pos += 4 + n


def admin_request_size(payload: bytes) -> tuple[int, int]:
    """How many partitions, and partitions times replicas, a CreateTopics / CreatePartitions payload asks
    the controller for; (0, 0) for anything else or a body that does not parse."""
    if len(payload) < 10 or struct.unpack_from(">h", payload, 0)[0] not in _ADMIN_KEYS:
        return 0, 0
    try:
        body = kafka_codec.decode_request(payload, {}).body or {}
    except InvalidFrame:  # a header the broker refuses: nothing reaches the controller
        return 0, 0
    partitions_total = total = 0
    for topic in body.get("topics") or ():
        partitions = int(topic.get("num_partitions", topic.get("count", 0)) or 0)
        replicas = int(topic.get("replication_factor", 1) or 1)
        assigned = sum(len(a.get("broker_ids") or ()) for a in topic.get("assignments") or ())
        if replicas > ADMIN_REPLICATION_MAX:
            replicas = ADMIN_PARTITIONS_PER_REQUEST + 1
        partitions_total += max(partitions, 0) + len(topic.get("assignments") or ())
        total += max(partitions, 0) * max(replicas, 1) + assigned
    return partitions_total, total


def admin_bounded(item: Input) -> bool:
    """Sent in a bounded run: small admin requests, and those past Kafka's bound (refused at once)."""
    for payload in _frames(item.data):
        partitions, size = admin_request_size(payload)
        if size > ADMIN_PARTITIONS_PER_REQUEST and partitions <= MAX_PARTITIONS_PER_BATCH:
            return False
    return True


# ------------------------------------------------------------------ the stream of inputs


def inputs(
    seed: int, corpus: list[bytes], *, pool_size: int = 400, bounded_admin: bool = True
) -> Iterator[Input]:
    """An endless, reproducible stream: half mutated seeds, a fifth lying framing, a twentieth the seeds as
    they are, the rest schema-valid requests with extreme values (heavy ones, past HEAVY_ENTRIES, a tenth as
    often as light ones). Seeds are picked by API key first, so that
    no API dominates. The extreme requests (slow to encode) are made once, ``pool_size`` of them, and each is
    sent many times: a pool topic is created, grown and deleted again and again. ``bounded_admin``: a
    mutated CreateTopics / CreatePartitions asking for more than ADMIN_PARTITIONS_PER_REQUEST partitions, but
    not past Kafka's bound of one request, is replaced by its seed."""
    rng = random.Random(seed)
    by_key: dict[int, list[bytes]] = {}
    for frame in corpus:
        by_key.setdefault(struct.unpack_from(">h", frame, 4)[0], []).append(frame)
    keys = sorted(by_key)
    pool = [extreme_request(rng, corpus) for _ in range(pool_size)]
    while True:
        roll = rng.random()
        seed_frame = rng.choice(by_key[rng.choice(keys)])
        if roll < 0.7:
            mutations = SEED_MUTATIONS if roll < 0.5 else FRAMING_MUTATIONS
            item = rng.choice(mutations)(rng, seed_frame, corpus)
            yield item if not bounded_admin or admin_bounded(item) else Input(seed_frame, "admin_bounded")
        elif roll < 0.75:
            yield Input(seed_frame, "seed")
        else:
            item = rng.choice(pool)
            # A heavy request (thousands of partitions) costs the brokers 20 to 50 times a light one and
            # finds nothing new the tenth time it is sent: it is sent a tenth as often.
            while item.heavy and rng.random() >= HEAVY_SHARE:
                item = rng.choice(pool)
            yield item
