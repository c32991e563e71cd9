"""Controller configuration: Kafka's keys where Kafka has them, read like a broker's (a properties file,
then ``ISRSIM_<KEY>`` environment variables, then ``--override key=value``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.topics import TopicSettings
from raft.quorum_state import QuorumConfig
from server.config import (
    AUTHORIZER_CONFIG_KEYS,
    DEFAULT_SECURITY_PROTOCOL_MAP,
    SECURITY_CONFIG_KEYS,
    ConfigError,
    ConfigKey,
    ConfigValues,
    ListenerEndpoint,
    parse_bool,
    parse_int,
    parse_listener_list,
    parse_protocol_map,
    parse_str,
)


def parse_voters(value: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters``: ``id@host:port,...`` (Kafka's form) to {id: (host, port)}."""
    voters: dict[int, tuple[str, int]] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if "@" not in item:
            raise ValueError(f"controller.quorum.voters: {item!r} is not id@host:port")
        id_text, address = item.split("@", 1)
        host, _, port = address.rpartition(":")
        if not id_text.strip().isdigit() or not port.isdigit() or not host:
            raise ValueError(f"controller.quorum.voters: {item!r} is not id@host:port")
        voters[int(id_text)] = (host.strip("[]"), int(port))
    return voters


CONTROLLER_CONFIG_KEYS: tuple[ConfigKey, ...] = (
    *AUTHORIZER_CONFIG_KEYS,
    ConfigKey(
        "node.id", parse_int, 1000, "The controller's id (brokers name it in controller.quorum.voters).", 0
    ),
    ConfigKey("cluster.id", parse_str, "isrsim", "Brokers registering with another cluster.id are refused."),
    ConfigKey(
        "listeners",
        parse_str,
        "PLAINTEXT://127.0.0.1:9093",
        "Where the controller listens: NAME://host:port, comma-separated; with several, METADATA answers "
        "with the brokers' addresses on the listener of the same name.",
    ),
    ConfigKey(
        "metadata.log.dir",
        parse_str,
        "./isrsim-controller",
        "The controller's directory: the metadata log __cluster_metadata-0 and quorum-state (a voter), "
        "or cluster-metadata.json (a controller without voters), and events.jsonl.",
    ),
    ConfigKey("broker.session.timeout.ms", parse_int, 9000, "A broker silent this long is fenced.", 1),
    ConfigKey(
        "unclean.leader.election.enable",
        parse_bool,
        False,
        "Default for topics: elect an out-of-ISR replica when no ISR member is live.",
    ),
    ConfigKey("default.replication.factor", parse_int, 1, "CREATE_TOPICS replication factor -1.", 1),
    ConfigKey("num.partitions", parse_int, 1, "CREATE_TOPICS partitions -1.", 1),
    ConfigKey("min.insync.replicas", parse_int, 1, "Default min.insync.replicas recorded for topics.", 1),
    ConfigKey("num.io.threads", parse_int, 4, "Request handler tasks.", 1),
    ConfigKey("queued.max.requests", parse_int, 500, "Requests queued for the handlers.", 1),
    ConfigKey("socket.request.max.bytes", parse_int, 104857600, "Largest request frame accepted.", 1),
    ConfigKey(
        "metrics.port",
        parse_int,
        0,
        "isrsim: the port of the Prometheus /metrics endpoint on the listener's host; 0 = off.",
        0,
    ),
    ConfigKey(
        "controller.socket.timeout.ms",
        parse_int,
        30000,
        "Timeout of a controller-to-broker request before it is retried on a new connection.",
        1,
    ),
    ConfigKey(
        "controller.retry.backoff.ms",
        parse_int,
        100,
        "isrsim: wait before re-sending to a broker after a failure (doubles up to 2s).",
        1,
    ),
    ConfigKey(
        "listener.security.protocol.map",
        parse_str,
        DEFAULT_SECURITY_PROTOCOL_MAP,
        "Listener name to security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); the controller "
        "reaches the brokers with the protocol of its first listener.",
    ),
    *SECURITY_CONFIG_KEYS,
    ConfigKey(
        "controller.quorum.voters",
        parse_str,
        "",
        "The controller quorum, id@host:port,... (this controller among them; one voter is a quorum of one); "
        "empty = a controller that runs alone, without a quorum (its state in cluster-metadata.json).",
    ),
    ConfigKey(
        "controller.quorum.election.timeout.ms",
        parse_int,
        1000,
        "A voter that hears of no leader this long (plus a random share of it) stands for election.",
        1,
    ),
    ConfigKey(
        "controller.quorum.fetch.timeout.ms",
        parse_int,
        2000,
        "A follower whose fetches from the leader fail this long stands for election; a leader that no "
        "majority fetched from for 1.5 x this resigns.",
        1,
    ),
    ConfigKey(
        "controller.quorum.election.backoff.max.ms",
        parse_int,
        1000,
        "The longest random wait before a candidate that lost an election stands again.",
        1,
    ),
    ConfigKey(
        "controller.quorum.request.timeout.ms", parse_int, 2000, "Timeout of a request to another voter.", 1
    ),
    ConfigKey(
        "controller.quorum.retry.backoff.ms", parse_int, 20, "Wait before retrying a failed voter request.", 1
    ),
)
CONTROLLER_KEYS_BY_NAME: dict[str, ConfigKey] = {k.name: k for k in CONTROLLER_CONFIG_KEYS}


@dataclass(frozen=True)
class ControllerConfig(ConfigValues):
    """The typed view of the controller's configuration; ``values`` keeps every key by its name."""

    KEYS = CONTROLLER_KEYS_BY_NAME

    def check(self) -> None:
        _ = self.listeners, self.protocols
        try:
            voters = self.quorum_voters
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if voters and self.node_id not in voters:
            raise ConfigError(
                f"node.id={self.node_id} is not one of controller.quorum.voters "
                f"({', '.join(map(str, voters))})"
            )

    @property
    def protocols(self) -> dict[str, str]:
        """Each listener's security protocol (``listener.security.protocol.map``; a listener it does not
        name is PLAINTEXT, as the controller's listeners were before the map)."""
        mapping = parse_protocol_map(str(self.values["listener.security.protocol.map"]))
        return {e.name: mapping.get(e.name, "PLAINTEXT") for e in self.listeners}

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def cluster_id(self) -> str:
        return str(self.values["cluster.id"])

    @property
    def listeners(self) -> list[ListenerEndpoint]:
        return parse_listener_list(str(self.values["listeners"]))

    @property
    def listener(self) -> tuple[str, int]:
        """The first listener's bind address (the one brokers are told in controller.quorum.voters)."""
        first = self.listeners[0]
        return first.host, first.port

    @property
    def directory(self) -> Path:
        return Path(str(self.values["metadata.log.dir"]))

    @property
    def quorum_voters(self) -> dict[int, tuple[str, int]]:
        """``controller.quorum.voters`` as {id: (host, port)}; empty when there is no quorum."""
        return parse_voters(str(self.values["controller.quorum.voters"]))

    @property
    def quorum_config(self) -> QuorumConfig:
        return QuorumConfig(
            election_timeout_ms=self.get_int("controller.quorum.election.timeout.ms"),
            fetch_timeout_ms=self.get_int("controller.quorum.fetch.timeout.ms"),
            election_backoff_max_ms=self.get_int("controller.quorum.election.backoff.max.ms"),
            request_timeout_ms=self.get_int("controller.quorum.request.timeout.ms"),
            retry_backoff_ms=self.get_int("controller.quorum.retry.backoff.ms"),
        )

    @property
    def topic_defaults(self) -> TopicSettings:
        return TopicSettings(
            num_partitions=self.get_int("num.partitions"),
            default_replication_factor=self.get_int("default.replication.factor"),
            min_insync_replicas=self.get_int("min.insync.replicas"),
            unclean_leader_election_enable=bool(self.values["unclean.leader.election.enable"]),
        )


__all__ = ["CONTROLLER_CONFIG_KEYS", "ControllerConfig"]
