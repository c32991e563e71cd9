"""Kafka's error codes (``org.apache.kafka.common.protocol.Errors``), one enum, Kafka's numbers."""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108


# Errors after which a client may retry the same request (Kafka's RetriableException subclasses).
RETRIABLE: frozenset[Errors] = frozenset(
    {
        Errors.CORRUPT_MESSAGE,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.LEADER_NOT_AVAILABLE,
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.REQUEST_TIMED_OUT,
        Errors.NETWORK_EXCEPTION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.KAFKA_STORAGE_ERROR,
        Errors.FETCH_SESSION_ID_NOT_FOUND,
        Errors.INVALID_FETCH_SESSION_EPOCH,
        Errors.FENCED_LEADER_EPOCH,
        Errors.UNKNOWN_LEADER_EPOCH,
        Errors.OFFSET_NOT_AVAILABLE,
        Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    }
)


class KafkaError(Exception):
    """An error that maps to one of Kafka's error codes. Raised inside the broker; the one place that turns
    exceptions into responses (``KafkaApis``) reads ``error`` and ``message``."""

    def __init__(self, error: Errors, message: str = "") -> None:
        super().__init__(f"{error.name}: {message}" if message else error.name)
        self.error = error
        self.message = message or error.name


class InvalidRequestError(KafkaError):
    """A body that does not match the API's schema (INVALID_REQUEST, 42)."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.INVALID_REQUEST, message)


class CorruptRecordError(KafkaError):
    """A record batch whose CRC, magic or lengths are wrong (CORRUPT_MESSAGE, 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.CORRUPT_MESSAGE, message)


class OffsetOutOfRangeError(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(Errors.OFFSET_OUT_OF_RANGE, message)


class InvalidRecordError(KafkaError):
    """A batch whose framing and CRC are fine but whose content a leader refuses (INVALID_RECORD, 87): the
    header disagrees with its records, a record is malformed, or an attribute asks for what isrsim does not
    do. ``record_errors`` are ``(batch_index, message)`` pairs for single records (Kafka's ``RecordError``);
    empty when the whole batch is at fault."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(Errors.INVALID_RECORD, message)
        self.record_errors = record_errors or []


class InvalidTimestampError(InvalidRecordError):
    """Records whose timestamps a leader refuses (INVALID_TIMESTAMP, 32), each listed in ``record_errors``
    as Kafka's ``RecordError``: a producer's batch that claims the LogAppendTime timestamp type."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message, record_errors)
        self.error = Errors.INVALID_TIMESTAMP
        self.args = (f"{Errors.INVALID_TIMESTAMP.name}: {message}",)


class KafkaStorageError(KafkaError):
    """The log directory holding a partition failed (an I/O error, a full disk) and is offline
    (KAFKA_STORAGE_ERROR, 56; retriable: the client moves to the new leader)."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.KAFKA_STORAGE_ERROR, message)
