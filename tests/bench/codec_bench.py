"""Codec figures behind docs/clients.md ("Which codec"): the two schema-generated Kafka codecs on PyPI,
kafka-python 3.x's protocol module and kio, on the messages a broker reads and writes most, and the whole
Kafka path of ``protocol.kafka_codec`` (library plus the mapping to docs/protocol.md bodies) against msgpack.

    .venv/bin/python tests/bench/codec_bench.py          (kio is optional: pip install kio)

A benchmark, not a test: it prints microseconds per message (median of 5 runs of N each).
"""

from __future__ import annotations

import io
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from protocol import kafka_codec as kc
from protocol import messages as m
from protocol.api_specs import REQUEST_TYPES
from protocol.framing import RequestHeader, decode_request, encode_request, encode_response_parts
from protocol.schema import from_body

RECORDS = os.urandom(16384)
N = 2000


def timeit(label: str, fn: Callable[[], Any], n: int = N) -> float:
    fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - start) / n * 1e6)
    us = statistics.median(runs)
    print(f"{label:64s} {us:9.1f} us")
    return us


def produce_body() -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": RECORDS}]}],
    }


def fetch_response_body() -> dict[str, Any]:
    part = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 10,
        "last_stable_offset": 10,
        "log_start_offset": 0,
        "records": RECORDS,
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [part]}],
    }


def metadata_response_body() -> dict[str, Any]:
    parts = [
        {
            "error_code": 0,
            "partition_index": p,
            "leader_id": 1,
            "leader_epoch": 3,
            "replica_nodes": [1, 2, 3],
            "isr_nodes": [1, 2, 3],
            "offline_replicas": [],
        }
        for p in range(10)
    ]
    return {
        "brokers": [{"node_id": i, "host": "127.0.0.1", "port": 9092 + i} for i in range(3)],
        "controller_id": 1,
        "topics": [{"error_code": 0, "name": f"topic-{t}", "partitions": parts} for t in range(10)],
    }


def kafka_python_raw() -> None:
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.metadata import MetadataResponse
    from kafka.protocol.producer import ProduceRequest

    print("kafka-python 3.x protocol module (library objects only)")
    p = ProduceRequest
    req = p(
        version=9,
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            p.TopicProduceData(
                version=9,
                name="t",
                partition_data=[p.TopicProduceData.PartitionProduceData(version=9, index=0, records=RECORDS)],
            )
        ],
    )
    data = req.encode()
    timeit("  Produce v9 request decode (16 KB records)", lambda: p.decode(data, version=9))
    timeit("  Produce v9 request encode (16 KB records)", lambda: req.encode(version=9))
    f = FetchResponse

    def fetch() -> bytes:
        part = f.FetchableTopicResponse.PartitionData(
            version=12,
            partition_index=0,
            high_watermark=10,
            last_stable_offset=10,
            log_start_offset=0,
            records=RECORDS,
        )
        topic = f.FetchableTopicResponse(version=12, topic="t", partitions=[part])
        return bytes(f(version=12, responses=[topic]).encode(version=12))

    timeit("  Fetch v12 response build + encode (16 KB records)", fetch)
    mr = MetadataResponse

    def metadata() -> bytes:
        parts = [
            mr.MetadataResponseTopic.MetadataResponsePartition(
                version=12,
                partition_index=p,
                leader_id=1,
                leader_epoch=3,
                replica_nodes=[1, 2, 3],
                isr_nodes=[1, 2, 3],
                offline_replicas=[],
            )
            for p in range(10)
        ]
        topics = [
            mr.MetadataResponseTopic(
                version=12, name=f"topic-{t}", topic_id=uuid.UUID(int=0), partitions=parts
            )
            for t in range(10)
        ]
        brokers = [
            mr.MetadataResponseBroker(version=12, node_id=i, host="127.0.0.1", port=9092 + i)
            for i in range(3)
        ]
        return bytes(mr(version=12, brokers=brokers, controller_id=1, topics=topics).encode(version=12))

    timeit("  Metadata v12 response build + encode (10 topics x 10)", metadata)


def kio_raw() -> None:
    try:
        import datetime

        from kio.schema.errors import ErrorCode
        from kio.schema.fetch.v12.response import FetchableTopicResponse, FetchResponse, PartitionData
        from kio.schema.metadata.v12 import response as mv12
        from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
        from kio.serial import entity_reader, entity_writer
        from kio.static.primitive import i16, i32, i64
    except ImportError:
        print("kio: not installed (pip install kio)")
        return

    def enc(writer: Any, obj: Any) -> bytes:
        buf = io.BytesIO()
        writer(buf, obj)
        return buf.getvalue()

    print("kio (library objects only)")
    req = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=datetime.timedelta(seconds=30),
        topic_data=(
            TopicProduceData(name="t", partition_data=(PartitionProduceData(index=i32(0), records=RECORDS),)),
        ),
    )
    w, r = entity_writer(ProduceRequest), entity_reader(ProduceRequest)
    data = enc(w, req)
    timeit("  Produce v9 request decode (16 KB records)", lambda: r(data, 0))
    timeit("  Produce v9 request encode (16 KB records)", lambda: enc(w, req))
    wf = entity_writer(FetchResponse)

    def fetch() -> bytes:
        part = PartitionData(
            partition_index=i32(0),
            error_code=ErrorCode.none,
            high_watermark=i64(10),
            last_stable_offset=i64(10),
            log_start_offset=i64(0),
            aborted_transactions=None,
            records=RECORDS,
        )
        resp = FetchResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=i32(0),
            responses=(FetchableTopicResponse(topic="t", partitions=(part,)),),
        )
        return enc(wf, resp)

    timeit("  Fetch v12 response build + encode (16 KB records)", fetch)
    wm = entity_writer(mv12.MetadataResponse)

    def metadata() -> bytes:
        parts = tuple(
            mv12.MetadataResponsePartition(
                error_code=ErrorCode.none,
                partition_index=i32(p),
                leader_id=i32(1),
                leader_epoch=i32(3),
                replica_nodes=(i32(1), i32(2), i32(3)),
                isr_nodes=(i32(1), i32(2), i32(3)),
                offline_replicas=(),
            )
            for p in range(10)
        )
        topics = tuple(
            mv12.MetadataResponseTopic(
                error_code=ErrorCode.none,
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=0),
                is_internal=False,
                topic_authorized_operations=i32(-(2**31)),
                partitions=parts,
            )
            for t in range(10)
        )
        brokers = tuple(
            mv12.MetadataResponseBroker(node_id=i32(i), host="127.0.0.1", port=i32(9092 + i), rack=None)
            for i in range(3)
        )
        resp = mv12.MetadataResponse(
            throttle_time=datetime.timedelta(0),
            brokers=brokers,
            cluster_id="c",
            controller_id=i32(1),
            topics=topics,
        )
        return enc(wm, resp)

    timeit("  Metadata v12 response build + encode (10 topics x 10)", metadata)


def whole_paths() -> None:
    types = {int(k): v for k, v in REQUEST_TYPES.items()}
    print("isrsim: a request frame to its checked dataclass, a docs/protocol.md response dict to a frame")
    kafka_frame = kc.encode_request(0, 9, 1, "bench", produce_body())[4:]
    msgpack_frame = encode_request(0, 0, 1, "bench", produce_body())[4:]

    def kafka_produce() -> Any:
        return from_body(m.ProduceRequest, kc.decode_request(kafka_frame, types).body)

    def msgpack_produce() -> Any:
        return from_body(m.ProduceRequest, decode_request(msgpack_frame)[1])

    timeit("  Produce request, Kafka v9 (16 KB records)", kafka_produce)
    timeit("  Produce request, msgpack (16 KB records)", msgpack_produce)
    fetch = fetch_response_body()
    timeit(
        "  Fetch response, Kafka v12 (16 KB records)",
        lambda: kc.encode_response_parts(RequestHeader(1, 12, 1, ""), {}, fetch),
    )
    timeit("  Fetch response, msgpack (16 KB records)", lambda: encode_response_parts(1, fetch))
    meta = metadata_response_body()
    timeit(
        "  Metadata response, Kafka v12 (10 topics x 10)",
        lambda: kc.encode_response_parts(RequestHeader(3, 12, 1, ""), {}, meta),
    )
    timeit("  Metadata response, msgpack (10 topics x 10)", lambda: encode_response_parts(1, meta))


if __name__ == "__main__":
    kafka_python_raw()
    kio_raw()
    whole_paths()
