"""The partition side of transactions (docs/transactions.md): WRITE_TXN_MARKERS (27), which a transaction
coordinator sends to partition leaders, and DESCRIBE_PRODUCERS (61), a partition's producer state.

Field names are Kafka's JSON-schema names in snake_case (``WriteTxnMarkersRequest.json``,
``DescribeProducersRequest.json``).

- WRITE_TXN_MARKERS, versions 0-1 (Kafka's encoding: 1, the version Kafka 4 keeps), a cluster action: for
  each marker the leader of each named partition appends an end-transaction control batch
  (``transaction_result`` true: COMMIT, false: ABORT) with acks=all and answers per partition once it is
  committed (or with the error).
- DESCRIBE_PRODUCERS, version 0: each partition's active producers, from its leader.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int16, Int32, Int64

NON_NEGATIVE = {"min": 0}


# ------------------------------------------------------------------------------- WRITE_TXN_MARKERS (27)


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersRequestTopic:
    name: str
    partition_indexes: list[Int32] = field(metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersRequestMarker:
    producer_id: Int64 = field(metadata=NON_NEGATIVE)
    producer_epoch: Int16 = field(metadata=NON_NEGATIVE)
    # True: COMMIT, False: ABORT.
    transaction_result: bool
    topics: list[WriteTxnMarkersRequestTopic]
    coordinator_epoch: Int32


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersRequest:
    markers: list[WriteTxnMarkersRequestMarker]


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersResponseTopic:
    name: str
    partitions: list[WriteTxnMarkersResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersResponseMarker:
    producer_id: Int64
    topics: list[WriteTxnMarkersResponseTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class WriteTxnMarkersResponse:
    markers: list[WriteTxnMarkersResponseMarker] = field(default_factory=list)


# ------------------------------------------------------------------------------ DESCRIBE_PRODUCERS (61)


@dataclass(slots=True, kw_only=True)
class DescribeProducersRequestTopic:
    name: str
    partition_indexes: list[Int32] = field(metadata=NON_NEGATIVE)


@dataclass(slots=True, kw_only=True)
class DescribeProducersRequest:
    topics: list[DescribeProducersRequestTopic]


@dataclass(slots=True, kw_only=True)
class DescribeProducersResponseProducer:
    producer_id: Int64
    producer_epoch: Int32
    last_sequence: Int32 = -1
    last_timestamp: Int64 = -1
    coordinator_epoch: Int32 = -1
    current_txn_start_offset: Int64 = -1


@dataclass(slots=True, kw_only=True)
class DescribeProducersResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    active_producers: list[DescribeProducersResponseProducer] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeProducersResponseTopic:
    name: str
    partitions: list[DescribeProducersResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeProducersResponse:
    throttle_time_ms: Int32 = 0
    topics: list[DescribeProducersResponseTopic] = field(default_factory=list)


__all__ = [
    "DescribeProducersRequest",
    "DescribeProducersRequestTopic",
    "DescribeProducersResponse",
    "DescribeProducersResponsePartition",
    "DescribeProducersResponseProducer",
    "DescribeProducersResponseTopic",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersRequestMarker",
    "WriteTxnMarkersRequestTopic",
    "WriteTxnMarkersResponse",
    "WriteTxnMarkersResponseMarker",
    "WriteTxnMarkersResponsePartition",
    "WriteTxnMarkersResponseTopic",
]
