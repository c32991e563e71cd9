"""API keys: Kafka's numbers where Kafka has the API, and isrsim's own above 1000."""

from __future__ import annotations

from enum import IntEnum


class ApiKeys(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    ALLOCATE_PRODUCER_IDS = 67
    DESCRIBE_REPLICA_STATE = 1000
    NET_FAULTS = 1001


# Special replica ids (Kafka's FetchRequest / ListOffsetsRequest constants).
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
# Special timestamps for LIST_OFFSETS.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # the record with the largest timestamp (LIST_OFFSETS v7, KIP-734)
# Leader epoch sentinels.
NO_PARTITION_LEADER_EPOCH = -1  # "no epoch": skip validation
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
