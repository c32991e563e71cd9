"""The transaction coordinator's APIs (SPEC §14, docs/transactions.md): ADD_PARTITIONS_TO_TXN (24),
ADD_OFFSETS_TO_TXN (25), END_TXN (26), TXN_OFFSET_COMMIT (28), DESCRIBE_TRANSACTIONS (65) and
LIST_TRANSACTIONS (66).

Field names are Kafka's JSON-schema names in snake_case (``AddPartitionsToTxnRequest.json`` and friends), so
Kafka's encoding maps onto them by name. ADD_PARTITIONS_TO_TXN has two shapes: versions 0-3 (a client's,
one transaction, fields ``v3_and_below_*``) and 4+ (a broker's, KIP-890: a list of ``transactions``, each
with ``verify_only``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int16, Int32, Int64

# ------------------------------------------------------------------------------ ADD_PARTITIONS_TO_TXN (24)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnTopic:
    name: str
    partitions: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnTransaction:
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    verify_only: bool = False
    topics: list[AddPartitionsToTxnTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnRequest:
    transactions: list[AddPartitionsToTxnTransaction] = field(default_factory=list)
    v3_and_below_transactional_id: str = ""
    v3_and_below_producer_id: Int64 = -1
    v3_and_below_producer_epoch: Int16 = -1
    v3_and_below_topics: list[AddPartitionsToTxnTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnPartitionResult:
    partition_index: Int32
    partition_error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnTopicResult:
    name: str
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnResult:
    transactional_id: str
    topic_results: list[AddPartitionsToTxnTopicResult] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AddPartitionsToTxnResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    results_by_transaction: list[AddPartitionsToTxnResult] = field(default_factory=list)
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult] = field(default_factory=list)


# -------------------------------------------------------------------------------- ADD_OFFSETS_TO_TXN (25)


@dataclass(slots=True, kw_only=True)
class AddOffsetsToTxnRequest:
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    group_id: str


@dataclass(slots=True, kw_only=True)
class AddOffsetsToTxnResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0


# ------------------------------------------------------------------------------------------- END_TXN (26)


@dataclass(slots=True, kw_only=True)
class EndTxnRequest:
    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    committed: bool


@dataclass(slots=True, kw_only=True)
class EndTxnResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0


# --------------------------------------------------------------------------------- TXN_OFFSET_COMMIT (28)


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitRequestPartition:
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitRequestTopic:
    name: str
    partitions: list[TxnOffsetCommitRequestPartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitRequest:
    transactional_id: str
    group_id: str
    producer_id: Int64
    producer_epoch: Int16
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[TxnOffsetCommitRequestTopic] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitResponseTopic:
    name: str
    partitions: list[TxnOffsetCommitResponsePartition] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class TxnOffsetCommitResponse:
    throttle_time_ms: Int32 = 0
    topics: list[TxnOffsetCommitResponseTopic] = field(default_factory=list)


# ----------------------------------------------------------------------------- DESCRIBE_TRANSACTIONS (65)


@dataclass(slots=True, kw_only=True)
class DescribeTransactionsRequest:
    transactional_ids: list[str] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeTransactionsTopicData:
    topic: str
    partitions: list[Int32] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeTransactionsState:
    error_code: Int16 = 0
    transactional_id: str
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = 0
    transaction_start_time_ms: Int64 = -1
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1
    topics: list[DescribeTransactionsTopicData] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeTransactionsResponse:
    throttle_time_ms: Int32 = 0
    transaction_states: list[DescribeTransactionsState] = field(default_factory=list)


# --------------------------------------------------------------------------------- LIST_TRANSACTIONS (66)


@dataclass(slots=True, kw_only=True)
class ListTransactionsRequest:
    state_filters: list[str] = field(default_factory=list)
    producer_id_filters: list[Int64] = field(default_factory=list)
    duration_filter: Int64 = -1


@dataclass(slots=True, kw_only=True)
class ListTransactionsState:
    transactional_id: str
    producer_id: Int64
    transaction_state: str


@dataclass(slots=True, kw_only=True)
class ListTransactionsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    unknown_state_filters: list[str] = field(default_factory=list)
    transaction_states: list[ListTransactionsState] = field(default_factory=list)


__all__ = [
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnPartitionResult",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResult",
    "AddPartitionsToTxnTopic",
    "AddPartitionsToTxnTopicResult",
    "AddPartitionsToTxnTransaction",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "DescribeTransactionsState",
    "DescribeTransactionsTopicData",
    "EndTxnRequest",
    "EndTxnResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
    "ListTransactionsState",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitRequestPartition",
    "TxnOffsetCommitRequestTopic",
    "TxnOffsetCommitResponse",
    "TxnOffsetCommitResponsePartition",
    "TxnOffsetCommitResponseTopic",
]
