"""Configuration: Kafka's keys and defaults, read from a ``server.properties``-style file.

One way in for every process: a subclass of :class:`ConfigValues` names its keys (:class:`ConfigKey`s,
built with the value parsers ``parse_int``, ``parse_bool``, ``parse_str``) and ``load`` reads them.
The broker's is ``broker.config.BrokerConfig``, the controller's ``controller.config.ControllerConfig``.

Precedence (lowest to highest): defaults, the file, environment variables ``ISRSIM_<KEY>`` (dots to
underscores, upper case: ``ISRSIM_BROKER_ID=2``), ``--override key=value``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from protocol.security import SECURITY_PROTOCOLS

ENV_PREFIX = "ISRSIM_"


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key and the problem."""


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        # Kafka's ConfigDef: "Invalid value fast for configuration x: Not a number of type INT".
        raise ValueError("not a number (an integer is expected)") from None


def parse_str(raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: its Kafka name, the parser of its text value, its default, a line of documentation, and
    for numbers the smallest value allowed."""

    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    minimum: int | None = None


# Kafka's class names are accepted for ``authorizer.class.name``; any of them turns on the authorizer
# (``server.security.authorizer.StandardAuthorizer``).
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "StandardAuthorizer",
        "AclAuthorizer",
    }
)


def check_authorizer_class(value: str) -> bool:
    """Whether ``authorizer.class.name`` turns the authorizer on: empty = off; one of Kafka's names = on;
    anything else raises ValueError naming the accepted names."""
    name = value.strip()
    if not name:
        return False
    if name not in AUTHORIZER_CLASS_NAMES:
        accepted = ", ".join(sorted(AUTHORIZER_CLASS_NAMES))
        raise ValueError(f"authorizer.class.name {name!r} is not supported; use one of: {accepted}")
    return True


def parse_authorizer_class(raw: str) -> str:
    name = raw.strip()
    check_authorizer_class(name)
    return name


# The authorizer's keys, read by brokers and the controller alike (docs/security.md, "Authorization").
AUTHORIZER_CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "authorizer.class.name",
        parse_authorizer_class,
        "",
        "Kafka's StandardAuthorizer (or AclAuthorizer) class name turns ACL authorization on; empty = off.",
    ),
    ConfigKey("super.users", parse_str, "", "Principals allowed everything, e.g. User:admin;User:broker."),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        parse_bool,
        False,
        "With the authorizer on: a resource with no ACL at all is open to everyone (else closed).",
    ),
)


SERVED_SECURITY_PROTOCOLS = SECURITY_PROTOCOLS
DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)

# TLS and SASL, the broker's and the controller's (server.security.listener_security reads them).
SECURITY_CONFIG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("ssl.keystore.type", parse_str, "PEM", "Format of ssl.keystore.location: PEM only."),
    ConfigKey(
        "ssl.keystore.location",
        parse_str,
        "",
        "PEM file with this node's private key and certificate chain (SSL and SASL_SSL listeners).",
    ),
    ConfigKey("ssl.key.password", parse_str, "", "Password of the private key, if it is encrypted."),
    ConfigKey("ssl.truststore.type", parse_str, "PEM", "Format of ssl.truststore.location: PEM only."),
    ConfigKey(
        "ssl.truststore.location", parse_str, "", "PEM CA certificates trusted for peers (and client certs)."
    ),
    ConfigKey(
        "ssl.client.auth", parse_str, "none", "Ask TLS clients for a certificate: none, requested, required."
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        parse_str,
        "https",
        "https: check a peer's host name against its certificate; empty: do not.",
    ),
    ConfigKey(
        "sasl.enabled.mechanisms",
        parse_str,
        "SCRAM-SHA-256",
        "SASL mechanisms served on SASL listeners: SCRAM-SHA-256, PLAIN (comma-separated).",
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        parse_str,
        "SCRAM-SHA-256",
        "The SASL mechanism this node uses towards its peers.",
    ),
    ConfigKey(
        "sasl.jaas.config",
        parse_str,
        "",
        'Who this node is to its peers: <ScramLoginModule|PlainLoginModule> required username=".." '
        'password="..";',
    ),
)


def parse_properties(text: str, *, source: str = "<text>") -> dict[str, str]:
    """Java ``.properties`` subset: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{source}:{lineno}: expected key=value, got {raw!r}")
        out[line[:sep].strip()] = line[sep + 1 :].strip()
    return out


def _env_overrides(environ: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """``ISRSIM_LOG_DIRS=/data`` -> ``{"log.dirs": "/data"}`` for the known keys."""
    out: dict[str, str] = {}
    for key in keys:
        env_name = ENV_PREFIX + key.replace(".", "_").upper()
        if env_name in environ:
            out[key] = environ[env_name]
    return out


def _parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--override {item!r}: expected key=value")
        key, value = item.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _resolve(
    keys: Mapping[str, ConfigKey], raw: Mapping[str, str], *, required: Iterable[str] = ()
) -> tuple[dict[str, Any], list[str]]:
    """Typed values for every key, and the unknown keys seen (Kafka warns about those, and so do we)."""
    values: dict[str, Any] = {name: key.default for name, key in keys.items()}
    unknown = sorted(set(raw) - set(keys))
    for name, text in raw.items():
        key = keys.get(name)
        if key is None:
            continue
        try:
            value = key.parse(text)
        except ValueError as exc:
            raise ConfigError(f"{name}={text!r}: {exc}") from None
        if key.minimum is not None and isinstance(value, int) and value < key.minimum:
            raise ConfigError(f"{name}={value}: must be at least {key.minimum}")
        values[name] = value
    for name in required:
        if values.get(name) is None:
            raise ConfigError(f"{name} is required (set it in the file, with --override or ISRSIM_ env)")
    return values, unknown


def _load_raw(
    config_file: Path | None, overrides: Iterable[str], environ: Mapping[str, str], keys: Iterable[str]
) -> dict[str, str]:
    raw: dict[str, str] = {}
    if config_file is not None:
        try:
            text = config_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc.strerror}") from None
        raw.update(parse_properties(text, source=str(config_file)))
    raw.update(_env_overrides(environ, keys))
    raw.update(_parse_overrides(overrides))
    return raw


def parse_listener(value: str) -> tuple[str, int]:
    """``PLAINTEXT://127.0.0.1:9092`` or ``127.0.0.1:9092`` -> (host, port). Port 0 asks the OS."""
    first = value.split(",")[0].strip()
    if "://" in first:
        first = first.split("://", 1)[1]
    host, sep, port = first.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"listeners={value!r}: expected PLAINTEXT://host:port or host:port")
    return (host or "0.0.0.0"), int(port)


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One named listener: ``INTERNAL://0.0.0.0:19092`` -> ("INTERNAL", "0.0.0.0", 19092)."""

    name: str
    host: str
    port: int


def parse_listener_list(value: str, *, key: str = "listeners") -> list[ListenerEndpoint]:
    """``INTERNAL://0.0.0.0:19092,EXTERNAL://:9092`` -> endpoints in order; a bare ``host:port`` is
    PLAINTEXT. Names are upper-cased (Kafka's ListenerName); a name given twice is an error."""
    out: list[ListenerEndpoint] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name = "PLAINTEXT"
        rest = item
        if "://" in item:
            name, rest = item.split("://", 1)
            name = name.strip().upper()
            if not name or not all(ch.isalnum() or ch in "_-" for ch in name):
                raise ConfigError(f"{key}={value!r}: bad listener name {name!r} in {item!r}")
        host, sep, port = rest.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"{key}={value!r}: expected NAME://host:port or host:port, got {item!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if any(e.name == name for e in out):
            raise ConfigError(f"{key}={value!r}: listener name {name} appears more than once")
        out.append(ListenerEndpoint(name, host or "0.0.0.0", int(port)))
    if not out:
        raise ConfigError(f"{key}={value!r}: expected at least one NAME://host:port")
    return out


def parse_protocol_map(value: str) -> dict[str, str]:
    """``INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT`` -> {listener name: security protocol}."""
    key = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or not protocol:
            raise ConfigError(f"{key}={value!r}: expected NAME:PROTOCOL pairs, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{key}: {name}:{protocol}: unknown security protocol "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in out:
            raise ConfigError(f"{key}={value!r}: listener name {name} appears more than once")
        out[name] = protocol
    return out


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """A broker's listeners, checked together (Kafka's KafkaConfig validation of the four keys)."""

    listeners: tuple[ListenerEndpoint, ...]  # what to bind, in the order given
    advertised: tuple[ListenerEndpoint, ...]  # what others are told, one per listener, same order
    protocols: dict[str, str]
    inter_broker: str

    @property
    def inter_broker_listener(self) -> ListenerEndpoint:
        return next(e for e in self.listeners if e.name == self.inter_broker)

    @property
    def inter_broker_advertised(self) -> ListenerEndpoint:
        return next(e for e in self.advertised if e.name == self.inter_broker)


def advertised_host(host: str) -> str:
    """A wildcard bind address is advertised as the loopback one (nothing better is known)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


def parse_listener_config(
    listeners: str, advertised: str = "", protocol_map: str = "", inter_broker: str = ""
) -> ListenerConfig:
    bound = parse_listener_list(listeners)
    names = [e.name for e in bound]
    protocols = parse_protocol_map(protocol_map or DEFAULT_SECURITY_PROTOCOL_MAP)
    for e in bound:
        if e.name not in protocols:
            raise ConfigError(
                f"listener.security.protocol.map: listener {e.name} (in listeners) has no security protocol; "
                f"add {e.name}:PLAINTEXT"
            )
        if protocols[e.name] not in SERVED_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listeners: {e.name} uses security protocol {protocols[e.name]}, which isrsim does not "
                "support yet (only PLAINTEXT)"
            )
    given: dict[str, ListenerEndpoint] = {}
    if advertised.strip():
        for e in parse_listener_list(advertised, key="advertised.listeners"):
            if e.name not in names:
                raise ConfigError(
                    f"advertised.listeners: {e.name} is not a listener (listeners has {', '.join(names)})"
                )
            given[e.name] = e
    adv = tuple(given.get(e.name) or ListenerEndpoint(e.name, advertised_host(e.host), e.port) for e in bound)
    inter = inter_broker.strip().upper()
    if inter:
        if inter not in names:
            raise ConfigError(
                f"inter.broker.listener.name: {inter} is not a listener (listeners has {', '.join(names)})"
            )
    else:
        inter = "PLAINTEXT" if "PLAINTEXT" in names else names[0]
    return ListenerConfig(tuple(bound), adv, protocols, inter)


def parse_voters(value: str) -> tuple[int, str, int] | None:
    """``1000@127.0.0.1:9093`` (Kafka's controller.quorum.voters form; one voter) or ``host:port``."""
    if not value.strip():
        return None
    first = value.split(",")[0].strip()
    node_id = -1
    if "@" in first:
        id_text, first = first.split("@", 1)
        if not id_text.strip().lstrip("-").isdigit():
            raise ConfigError(f"controller.quorum.voters={value!r}: expected id@host:port")
        node_id = int(id_text)
    host, port = parse_listener(first)
    return node_id, host, port


def parse_voter_addresses(value: str) -> list[tuple[str, int]]:
    """Every voter's ``host:port`` of ``controller.quorum.voters`` (``id@host:port,...``), in order."""
    out: list[tuple[str, int]] = []
    for item in value.split(","):
        if item.strip():
            parsed = parse_voters(item)
            if parsed is not None:
                out.append((parsed[1], parsed[2]))
    return out


def parse_voter_ids(value: str) -> dict[int, tuple[str, int]]:
    """``controller.quorum.voters`` as {id: (host, port)} (voters given without an id are left out)."""
    out: dict[int, tuple[str, int]] = {}
    for item in value.split(","):
        if item.strip():
            parsed = parse_voters(item)
            if parsed is not None and parsed[0] >= 0:
                out[parsed[0]] = (parsed[1], parsed[2])
    return out


def parse_topic_partitions(value: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        topic, sep, part = item.rpartition("-")
        if not sep or not topic or not part.isdigit():
            raise ConfigError(f"initial.leader.partitions: {item!r} is not <topic>-<partition>")
        out.append((topic, int(part)))
    return out


@dataclass(frozen=True)
class ConfigValues:
    """Typed values by Kafka key name, as ``resolve`` made them, and the unknown keys that were seen."""

    values: dict[str, Any]
    unknown_keys: list[str] = field(default_factory=list)

    # The keys a subclass reads, those it cannot start without, and other names accepted for a key.
    KEYS: ClassVar[Mapping[str, ConfigKey]] = {}
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    ALIASES: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def load(
        cls,
        config_file: Path | None = None,
        overrides: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Defaults, then the file, then ``ISRSIM_<KEY>`` variables, then ``--override`` values."""
        env = os.environ if environ is None else environ
        raw = _load_raw(config_file, overrides, env, [*cls.KEYS, *cls.ALIASES])
        for alias, name in cls.ALIASES.items():
            if alias in raw:
                value = raw.pop(alias)
                if name in raw and raw[name] != value:
                    raise ConfigError(f"{alias}={value} and {name}={raw[name]} disagree (they are one key)")
                raw[name] = value
        values, unknown = _resolve(cls.KEYS, raw, required=cls.REQUIRED)
        config = cls(values, unknown)
        config.check()
        return config

    def check(self) -> None:
        """Parses composite values at start-up, so a bad one fails there, naming its key."""

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any]) -> Self:
        return cls.load(None, [f"{k}={v}" for k, v in settings.items()], environ={})

    def get(self, key: str) -> Any:
        return self.values[key]

    def get_int(self, key: str) -> int:
        value = self.values[key]
        assert isinstance(value, int)
        return value
