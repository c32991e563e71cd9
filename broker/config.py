"""The broker's configuration: Kafka's broker keys and defaults (``BROKER_CONFIG_KEYS``) and
:class:`BrokerConfig`, read as every process reads its configuration (``server.config``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from protocol.replication import TRUNCATION_MODE_KEY, TruncationMode
from server.config import (
    AUTHORIZER_CONFIG_KEYS,
    DEFAULT_SECURITY_PROTOCOL_MAP,
    SECURITY_CONFIG_KEYS,
    ConfigKey,
    ConfigValues,
    ListenerConfig,
    parse_bool,
    parse_int,
    parse_listener_config,
    parse_str,
    parse_topic_partitions,
    parse_voter_addresses,
    parse_voter_ids,
    parse_voters,
)

# Kafka's keys with Kafka's defaults, plus the few that are isrsim's own (marked).
BROKER_CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *AUTHORIZER_CONFIG_KEYS,
    ConfigKey("broker.id", parse_int, None, "This broker's id.", 0),
    ConfigKey("cluster.id", parse_str, "isrsim", "Cluster id written to meta.properties."),
    ConfigKey(
        "listeners",
        parse_str,
        "PLAINTEXT://127.0.0.1:9092",
        "Where the broker listens: NAME://host:port, comma-separated (a bare host:port is PLAINTEXT).",
    ),
    ConfigKey(
        "advertised.listeners",
        parse_str,
        "",
        "Addresses given to others, NAME://host:port by listener name; a listener not named here "
        "advertises its own address (0.0.0.0 as 127.0.0.1).",
    ),
    ConfigKey(
        "listener.security.protocol.map",
        parse_str,
        DEFAULT_SECURITY_PROTOCOL_MAP,
        "Listener name to security protocol, NAME:PROTOCOL pairs (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        parse_str,
        "",
        "The listener brokers and the controller reach this broker on; default: PLAINTEXT if "
        "listeners has it, else the first listener.",
    ),
    ConfigKey("log.dirs", parse_str, "./isrsim-logs", "The data directory."),
    ConfigKey("journal.dir", parse_str, "", "isrsim: where events.jsonl goes; defaults to log.dirs."),
    ConfigKey(
        "controller.quorum.voters", parse_str, "", "Controller address id@host:port; empty = unmanaged."
    ),
    ConfigKey("num.io.threads", parse_int, 8, "Request handler tasks.", 1),
    ConfigKey(
        "queued.max.requests", parse_int, 500, "Requests queued for the handlers before reads pause.", 1
    ),
    ConfigKey("num.replica.fetchers", parse_int, 1, "Fetcher tasks per source broker.", 1),
    ConfigKey("replica.fetch.wait.max.ms", parse_int, 500, "Follower fetch long-poll time.", 0),
    ConfigKey("replica.fetch.min.bytes", parse_int, 1, "Follower fetch min bytes.", 0),
    ConfigKey("replica.fetch.max.bytes", parse_int, 1048576, "Follower fetch bytes per partition.", 1),
    ConfigKey(
        "replica.fetch.response.max.bytes", parse_int, 10485760, "Follower fetch bytes per response.", 1
    ),
    ConfigKey("replica.fetch.backoff.ms", parse_int, 1000, "Back-off after a fetch error.", 0),
    ConfigKey("replica.lag.time.max.ms", parse_int, 30000, "A follower behind this long leaves the ISR.", 1),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", parse_int, 5000, "HW checkpoint period.", 1),
    ConfigKey("replica.socket.timeout.ms", parse_int, 30000, "Follower request timeout.", 1),
    ConfigKey("min.insync.replicas", parse_int, 1, "Minimum ISR size for acks=-1 produce.", 1),
    ConfigKey(
        "auto.create.topics.enable", parse_bool, True, "A Kafka client's METADATA creates unknown topics."
    ),
    ConfigKey("num.partitions", parse_int, 1, "Partitions of an auto-created topic.", 1),
    ConfigKey(
        "default.replication.factor",
        parse_int,
        -1,
        "Replication factor of an auto-created topic; -1: min(3, live brokers).",
        -1,
    ),
    ConfigKey(
        "unclean.leader.election.enable", parse_bool, False, "Elect out-of-ISR replicas as a last resort."
    ),
    ConfigKey("max.incremental.fetch.session.cache.slots", parse_int, 1000, "Fetch session cache size.", 0),
    ConfigKey(
        "min.incremental.fetch.session.eviction.ms",
        parse_int,
        120000,
        "Idle time before a session is stale.",
        0,
    ),
    ConfigKey("broker.heartbeat.interval.ms", parse_int, 2000, "Heartbeat period to the controller.", 1),
    ConfigKey(
        "broker.session.timeout.ms", parse_int, 9000, "Controller fences a broker silent this long.", 1
    ),
    ConfigKey("log.segment.bytes", parse_int, 1073741824, "Segment size before a roll.", 1024),
    ConfigKey("log.index.interval.bytes", parse_int, 4096, "Bytes between sparse index entries.", 1),
    # Retention (docs/storage.md): the defaults of the topic configs retention.ms, retention.bytes,
    # segment.ms, cleanup.policy ...; log.retention.ms wins over .minutes, which wins over .hours (Kafka).
    ConfigKey("log.retention.hours", parse_int, 168, "Hours a segment is kept (retention.ms's default).", -1),
    ConfigKey("log.retention.minutes", parse_int, None, "Minutes a segment is kept; wins over hours.", -1),
    ConfigKey(
        "log.retention.ms", parse_int, None, "Ms a segment is kept; wins over minutes; -1: forever.", -1
    ),
    ConfigKey("log.retention.bytes", parse_int, -1, "Largest a partition's log may grow; -1: no limit.", -1),
    ConfigKey("log.roll.hours", parse_int, 168, "Age at which the active segment is rolled.", 1),
    ConfigKey("log.roll.ms", parse_int, None, "Age in ms at which the active segment is rolled; wins.", 1),
    ConfigKey(
        "log.retention.check.interval.ms",
        parse_int,
        300000,
        "How often every log deletes the segments its retention no longer keeps.",
        1,
    ),
    ConfigKey("log.cleanup.policy", parse_str, "delete", "delete, compact or both (docs/storage.md)."),
    ConfigKey(
        "log.cleaner.delete.retention.ms",
        parse_int,
        86400000,
        "Tombstone retention (delete.retention.ms).",
        0,
    ),
    ConfigKey(
        "log.cleaner.min.compaction.lag.ms", parse_int, 0, "Uncompacted time (min.compaction.lag.ms).", 0
    ),
    ConfigKey(
        "log.cleaner.min.cleanable.ratio", parse_str, "0.5", "Dirty ratio (min.cleanable.dirty.ratio)."
    ),
    # The log cleaner (docs/storage.md), Kafka's keys and defaults.
    ConfigKey(
        "log.cleaner.max.compaction.lag.ms",
        parse_int,
        9223372036854775807,
        "Dirty age that forces a clean (max.compaction.lag.ms).",
        1,
    ),
    ConfigKey("log.cleaner.enable", parse_bool, True, "Run the log cleaner on compacted topics."),
    ConfigKey("log.cleaner.threads", parse_int, 1, "Cleaner threads (isrsim: one task).", 0),
    ConfigKey(
        "log.cleaner.dedupe.buffer.size", parse_int, 134217728, "Offset map memory (24 bytes a key).", 1024
    ),
    ConfigKey("log.cleaner.io.buffer.size", parse_int, 524288, "Cleaner read/write chunk size.", 4096),
    ConfigKey("log.cleaner.io.buffer.load.factor", parse_str, "0.9", "How full the offset map may get."),
    ConfigKey(
        "log.cleaner.io.max.bytes.per.second",
        parse_str,
        "1.7976931348623157E308",
        "The cleaner's read plus write I/O budget.",
    ),
    ConfigKey("log.cleaner.backoff.ms", parse_int, 15000, "Sleep when no log needs cleaning.", 0),
    ConfigKey("message.max.bytes", parse_int, 1048588, "Largest record batch accepted.", 100),
    ConfigKey("socket.request.max.bytes", parse_int, 104857600, "Largest request frame accepted.", 1),
    ConfigKey(
        "queued.max.request.bytes",
        parse_int,
        209715200,
        "Memory pool for request bytes being read or queued; reads stop when it is used up (<= 0: no "
        "limit, Kafka's default -1).",
        -1,
    ),
    ConfigKey("connections.max.idle.ms", parse_int, 600000, "Close connections idle this long.", 1),
    ConfigKey(
        "max.connections", parse_int, 2147483647, "Connections accepted at once; then accepts wait.", 1
    ),
    ConfigKey(
        "max.connections.per.ip", parse_int, 2147483647, "Connections from one address; more are closed.", 1
    ),
    ConfigKey(
        "request.timeout.ms", parse_int, 30000, "Client-side timeout for broker-to-broker requests.", 1
    ),
    ConfigKey(
        "controlled.shutdown.enable", parse_bool, True, "On SIGTERM, move leaderships away before stopping."
    ),
    ConfigKey(
        "controlled.shutdown.timeout.ms",
        parse_int,
        15000,
        "isrsim: how long a controlled shutdown may retry before the broker stops anyway.",
        0,
    ),
    ConfigKey(
        "metrics.port",
        parse_int,
        0,
        "isrsim: the port of the Prometheus /metrics endpoint on the listener's host; 0 = off.",
        0,
    ),
    ConfigKey(
        "journal.offsets.interval.ms", parse_int, 100, "isrsim: min period of `offsets` journal events.", 1
    ),
    ConfigKey("offsets.topic.num.partitions", parse_int, 50, "Partitions of __consumer_offsets.", 1),
    ConfigKey(
        "offsets.topic.replication.factor",
        parse_int,
        3,
        "Replication factor of __consumer_offsets (at most the live brokers when it is created).",
        1,
    ),
    ConfigKey(
        "offsets.commit.timeout.ms", parse_int, 5000, "How long an offset commit waits for acks=all.", 1
    ),
    ConfigKey("offsets.load.buffer.size", parse_int, 5242880, "Bytes read at a time when loading groups.", 1),
    ConfigKey("offset.metadata.max.bytes", parse_int, 4096, "Largest metadata of a committed offset.", 0),
    ConfigKey("transaction.state.log.num.partitions", parse_int, 50, "Partitions of __transaction_state.", 1),
    ConfigKey(
        "transaction.state.log.replication.factor",
        parse_int,
        3,
        "Replication factor of __transaction_state (at most the live brokers when it is created).",
        1,
    ),
    ConfigKey(
        "transaction.state.log.min.isr", parse_int, 2, "min.insync.replicas of __transaction_state.", 1
    ),
    ConfigKey(
        "transaction.state.log.load.buffer.size",
        parse_int,
        5242880,
        "Bytes read at a time when loading transactional ids.",
        1,
    ),
    ConfigKey(
        "transaction.max.timeout.ms",
        parse_int,
        900000,
        "Largest transaction.timeout.ms a producer may ask.",
        1,
    ),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        parse_int,
        10000,
        "How often the coordinator aborts transactions open past their timeout.",
        1,
    ),
    ConfigKey(
        "transaction.partition.verification.enable",
        parse_bool,
        True,
        "KIP-890: a leader appends a transactional batch only once the transaction coordinator confirms "
        "the partition is in the producer's transaction (false: the legacy mode, hanging transactions).",
    ),
    ConfigKey(
        "group.min.session.timeout.ms", parse_int, 6000, "Smallest session timeout a member may ask.", 0
    ),
    ConfigKey(
        "group.max.session.timeout.ms", parse_int, 1800000, "Largest session timeout a member may ask.", 0
    ),
    ConfigKey(
        "group.initial.rebalance.delay.ms",
        parse_int,
        3000,
        "How long the first rebalance of an empty group waits for more members.",
        0,
    ),
    ConfigKey("group.max.size", parse_int, 2147483647, "Most members a group may have.", 1),
    ConfigKey(
        "offsets.retention.minutes",
        parse_int,
        10080,
        "How long an Empty group's committed offsets are kept (from when it became Empty).",
        1,
    ),
    ConfigKey(
        "offsets.retention.check.interval.ms",
        parse_int,
        600000,
        "How often expired committed offsets are looked for.",
        1,
    ),
    ConfigKey(
        "initial.leader.partitions",
        parse_str,
        "",
        "isrsim: topic-partitions (t-0,t-1) this broker leads alone from start-up, with no LEADER_AND_ISR.",
    ),
    ConfigKey(
        TRUNCATION_MODE_KEY,
        TruncationMode.parse,
        TruncationMode.LEADER_EPOCH,
        "isrsim: how a follower truncates: leader-epoch (Kafka 2.0+), leader-epoch-pre-kip-279 (0.11 - 1.1), "
        "high-watermark (<= 0.10.2). See docs/truncation-modes.md.",
    ),
    *SECURITY_CONFIG_KEYS,
)
KEYS_BY_NAME: dict[str, ConfigKey] = {k.name: k for k in BROKER_CONFIG_KEYS}


@dataclass(frozen=True)
class BrokerConfig(ConfigValues):
    """The typed view of a broker's configuration; ``values`` keeps every key by its Kafka name."""

    KEYS = KEYS_BY_NAME
    REQUIRED = ("broker.id",)
    ALIASES = {"node.id": "broker.id"}  # KRaft's name

    def check(self) -> None:
        _ = (self.listener_config, self.controller, self.initial_leader_partitions)

    @property
    def broker_id(self) -> int:
        return self.get_int("broker.id")

    @property
    def cluster_id(self) -> str:
        return str(self.values["cluster.id"])

    @property
    def listener_config(self) -> ListenerConfig:
        return parse_listener_config(
            str(self.values["listeners"]),
            str(self.values["advertised.listeners"]),
            str(self.values["listener.security.protocol.map"]),
            str(self.values["inter.broker.listener.name"]),
        )

    @property
    def listener(self) -> tuple[str, int]:
        """The inter-broker listener's bind address (the only one, with a single listener)."""
        e = self.listener_config.inter_broker_listener
        return e.host, e.port

    @property
    def log_dir(self) -> Path:
        return Path(str(self.values["log.dirs"]).split(",")[0])

    @property
    def journal_dir(self) -> Path:
        value = str(self.values["journal.dir"])
        return Path(value) if value else self.log_dir

    @property
    def controller(self) -> tuple[int, str, int] | None:
        return parse_voters(str(self.values["controller.quorum.voters"]))

    @property
    def controller_nodes(self) -> list[tuple[int, str, int]]:
        """Every controller voter's id (-1 for a bare ``host:port``) and address."""
        out: list[tuple[int, str, int]] = []
        for item in str(self.values["controller.quorum.voters"]).split(","):
            parsed = parse_voters(item) if item.strip() else None
            if parsed is not None:
                out.append(parsed)
        return out

    @property
    def controller_voters(self) -> list[tuple[str, int]]:
        """Every controller voter's address (the broker finds the active one among them)."""
        return parse_voter_addresses(str(self.values["controller.quorum.voters"]))

    @property
    def controller_voter_ids(self) -> dict[int, tuple[str, int]]:
        """Each controller voter's address by its id."""
        return parse_voter_ids(str(self.values["controller.quorum.voters"]))

    @property
    def initial_leader_partitions(self) -> list[tuple[str, int]]:
        return parse_topic_partitions(str(self.values["initial.leader.partitions"]))

    @property
    def truncation_mode(self) -> TruncationMode:
        value = self.values[TRUNCATION_MODE_KEY]
        assert isinstance(value, TruncationMode)
        return value
