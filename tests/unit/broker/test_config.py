"""Broker configuration: defaults, the properties file, ISRSIM_* environment variables and --override, in
that order of precedence; every bad value names its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from server.config import ConfigError, parse_listener, parse_properties


def load(
    tmp_path: Path, text: str | None = None, overrides: list[str] | None = None, **env: str
) -> BrokerConfig:
    path = None
    if text is not None:
        path = tmp_path / "server.properties"
        path.write_text(text)
    return BrokerConfig.load(path, overrides or [], environ=env)


def test_defaults_are_kafkas(tmp_path: Path) -> None:
    c = load(tmp_path, overrides=["broker.id=3"])
    assert c.broker_id == 3
    assert c.get_int("num.io.threads") == 8
    assert c.get_int("queued.max.requests") == 500
    assert c.get_int("replica.lag.time.max.ms") == 30000
    assert c.get_int("min.insync.replicas") == 1
    assert c.get_int("socket.request.max.bytes") == 104857600
    assert c.get_int("message.max.bytes") == 1048588
    assert c.get("unclean.leader.election.enable") is False
    assert c.listener == ("127.0.0.1", 9092)
    assert c.controller is None
    assert c.initial_leader_partitions == []
    assert c.unknown_keys == []


def test_file_values(tmp_path: Path) -> None:
    c = load(
        tmp_path,
        "# a comment\n! another\n\nbroker.id=2\nlisteners: PLAINTEXT://0.0.0.0:19092\n"
        "log.dirs = /data/a,/data/b\nunclean.leader.election.enable=true\n"
        "initial.leader.partitions=my-topic-0, t-1\n",
    )
    assert c.broker_id == 2
    assert c.listener == ("0.0.0.0", 19092)
    assert c.log_dir == Path("/data/a")  # the first of log.dirs
    assert c.journal_dir == c.log_dir  # journal.dir defaults to the data dir
    assert c.get("unclean.leader.election.enable") is True
    assert c.initial_leader_partitions == [("my-topic", 0), ("t", 1)]


def test_precedence_file_then_env_then_override(tmp_path: Path) -> None:
    text = "broker.id=1\nnum.io.threads=2\nnum.replica.fetchers=2\nmin.insync.replicas=2\n"
    c = load(tmp_path, text)
    assert (c.get_int("num.io.threads"), c.get_int("num.replica.fetchers")) == (2, 2)
    c = load(tmp_path, text, ISRSIM_NUM_IO_THREADS="3", ISRSIM_NUM_REPLICA_FETCHERS="3")
    assert (c.get_int("num.io.threads"), c.get_int("num.replica.fetchers")) == (3, 3)
    c = load(tmp_path, text, ["num.io.threads=4"], ISRSIM_NUM_IO_THREADS="3", ISRSIM_NUM_REPLICA_FETCHERS="3")
    assert (c.get_int("num.io.threads"), c.get_int("num.replica.fetchers")) == (4, 3)
    assert c.get_int("min.insync.replicas") == 2  # untouched by env and overrides


def test_environment_names(tmp_path: Path) -> None:
    c = load(
        tmp_path, ISRSIM_BROKER_ID="7", ISRSIM_LOG_DIRS="/srv/kafka", ISRSIM_NOT_A_KEY="x", BROKER_ID="9"
    )
    assert c.broker_id == 7
    assert c.log_dir == Path("/srv/kafka")
    assert c.unknown_keys == []  # only known keys are read from the environment


def test_unknown_keys_are_kept_for_a_warning(tmp_path: Path) -> None:
    c = load(tmp_path, "broker.id=1\nlog.flush.interval.messages=10\n", ["zookeeper.connect=x:2181"])
    assert c.unknown_keys == ["log.flush.interval.messages", "zookeeper.connect"]


def test_listener_forms() -> None:
    assert parse_listener("PLAINTEXT://127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert parse_listener("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listener(":9092") == ("0.0.0.0", 9092)
    assert parse_listener("PLAINTEXT://h1:1,PLAINTEXT://h2:2") == ("h1", 1)


def test_controller_voters(tmp_path: Path) -> None:
    c = load(tmp_path, overrides=["broker.id=1", "controller.quorum.voters=1000@127.0.0.1:9093"])
    assert c.controller == (1000, "127.0.0.1", 9093)
    c = load(tmp_path, overrides=["broker.id=1", "controller.quorum.voters=ctl:9093"])
    assert c.controller == (-1, "ctl", 9093)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["num.io.threads=many"], "num.io.threads"),
        (["num.io.threads=0"], "num.io.threads"),  # below the minimum of 1
        (["min.insync.replicas=-1"], "min.insync.replicas"),
        (["unclean.leader.election.enable=maybe"], "unclean.leader.election.enable"),
        (["socket.request.max.bytes=1e6"], "socket.request.max.bytes"),
        (["log.segment.bytes=10"], "log.segment.bytes"),
        (["listeners=nowhere"], "listeners"),
        (["listeners=PLAINTEXT://host:port"], "listeners"),
        (["controller.quorum.voters=x@h:1"], "controller.quorum.voters"),
        (["initial.leader.partitions=t-0,nodash"], "initial.leader.partitions"),
        (["initial.leader.partitions=t-x"], "initial.leader.partitions"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, overrides=["broker.id=1", *overrides])
    assert key in str(exc.value)


def test_bad_environment_value_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"replica\.fetch\.max\.bytes"):
        load(tmp_path, overrides=["broker.id=1"], ISRSIM_REPLICA_FETCH_MAX_BYTES="lots")


def test_broker_id_is_required(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"broker\.id is required"):
        load(tmp_path, "listeners=127.0.0.1:0\n")
    with pytest.raises(ConfigError, match=r"broker\.id"):
        load(tmp_path, overrides=["broker.id=-3"])


def test_bad_file_line_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server\.properties:3: expected key=value"):
        load(tmp_path, "broker.id=1\n# fine\njust some words\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        BrokerConfig.load(tmp_path / "nope.properties", ["broker.id=1"], environ={})


def test_override_without_equals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        load(tmp_path, overrides=["broker.id=1", "num.io.threads"])


def test_properties_parser_keeps_separators_in_values() -> None:
    props = parse_properties("a=b=c\nurl: http://x:1\n  spaced  =  v  \n")
    assert props == {"a": "b=c", "url": "http://x:1", "spaced": "v"}


def test_from_dict(tmp_path: Path) -> None:
    c = BrokerConfig.from_dict(
        {"broker.id": 5, "log.dirs": str(tmp_path), "journal.dir": str(tmp_path / "j")}
    )
    assert c.broker_id == 5 and c.log_dir == tmp_path and c.journal_dir == tmp_path / "j"


def test_node_id_is_kraft_name_for_broker_id(tmp_path: Path) -> None:
    assert load(tmp_path, "node.id=4\n").broker_id == 4
    assert load(tmp_path, ISRSIM_NODE_ID="5").broker_id == 5
    assert load(tmp_path, "node.id=6\nbroker.id=6\n").unknown_keys == []
    with pytest.raises(ConfigError, match=r"node\.id=6 and broker\.id=7 disagree"):
        load(tmp_path, "node.id=6\nbroker.id=7\n")


# ------------------------------------------------------------------------ named listeners (Kafka's four keys)


def listeners_of(tmp_path: Path, *overrides: str) -> BrokerConfig:
    return load(tmp_path, overrides=["broker.id=1", *overrides])


def test_a_bare_address_is_one_plaintext_listener(tmp_path: Path) -> None:
    lc = listeners_of(tmp_path, "listeners=0.0.0.0:9092").listener_config
    assert [(e.name, e.host, e.port) for e in lc.listeners] == [("PLAINTEXT", "0.0.0.0", 9092)]
    assert [(e.name, e.host, e.port) for e in lc.advertised] == [("PLAINTEXT", "127.0.0.1", 9092)]
    assert lc.inter_broker == "PLAINTEXT"


def test_named_listeners_advertised_by_name(tmp_path: Path) -> None:
    c = listeners_of(
        tmp_path,
        "listeners=INTERNAL://0.0.0.0:19092,EXTERNAL://0.0.0.0:9092",
        "advertised.listeners=EXTERNAL://localhost:19091,INTERNAL://broker-1:19092",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    )
    lc = c.listener_config
    assert [e.name for e in lc.listeners] == ["INTERNAL", "EXTERNAL"]
    # advertised in the order of listeners, whatever the order they were given in
    assert [(e.name, e.host, e.port) for e in lc.advertised] == [
        ("INTERNAL", "broker-1", 19092),
        ("EXTERNAL", "localhost", 19091),
    ]
    assert lc.inter_broker == "INTERNAL"  # no PLAINTEXT: the first listener
    assert c.listener == ("0.0.0.0", 19092)  # the inter-broker listener's bind address


def test_inter_broker_listener_default_and_choice(tmp_path: Path) -> None:
    both = (
        "listeners=EXTERNAL://:9092,PLAINTEXT://:19092",
        "listener.security.protocol.map=EXTERNAL:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    )
    assert listeners_of(tmp_path, *both).listener_config.inter_broker == "PLAINTEXT"  # Kafka's default
    chosen = listeners_of(tmp_path, *both, "inter.broker.listener.name=external")
    assert chosen.listener_config.inter_broker == "EXTERNAL"
    assert chosen.listener == ("0.0.0.0", 9092)


def test_a_listener_not_advertised_advertises_its_own_address(tmp_path: Path) -> None:
    c = listeners_of(
        tmp_path,
        "listeners=PLAINTEXT://127.0.0.2:9092,OTHER://0.0.0.0:0",
        "advertised.listeners=PLAINTEXT://kafka-1:9092",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
    )
    assert [(e.name, e.host, e.port) for e in c.listener_config.advertised] == [
        ("PLAINTEXT", "kafka-1", 9092),
        ("OTHER", "127.0.0.1", 0),  # port 0: the bound port is advertised once known
    ]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["listeners=A://:1,B://:2,A://:3"],
            "listeners='A://:1,B://:2,A://:3': listener name A appears more",
        ),
        (
            ["listeners=PLAINTEXT://:1", "advertised.listeners=EXTERNAL://h:1"],
            "advertised.listeners: EXTERNAL",
        ),
        (["listeners=PLAINTEXT://:1", "inter.broker.listener.name=INTERNAL"], "inter.broker.listener.name"),
        (["listeners=INTERNAL://:1"], "listener.security.protocol.map: listener INTERNAL"),
        (["listener.security.protocol.map=PLAINTEXT:TLS"], "unknown security protocol"),
        (["listener.security.protocol.map=PLAINTEXT"], "expected NAME:PROTOCOL"),
        (["listeners=INTERNAL://nohost"], "expected NAME://host:port"),
        (["listeners= , "], "at least one"),
    ],
)
def test_bad_listener_settings_name_the_key(tmp_path: Path, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        listeners_of(tmp_path, *overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)
