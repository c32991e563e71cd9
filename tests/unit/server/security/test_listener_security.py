"""A node's TLS and SASL settings: what each listener asks, who the node is to its peers, and bad settings
refused at start-up naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from kit.security_files import CertificateAuthority, jaas_config
from protocol.security import ClientSecurity, SecurityConfigError, parse_jaas_config
from server.config import ConfigError
from server.security.listener_security import inter_broker_client_security, listener_securities


def securities(*overrides: str) -> dict[str, object]:
    config = BrokerConfig.from_dict({"broker.id": 1, **dict(o.split("=", 1) for o in overrides)})
    lc = config.listener_config
    return dict(listener_securities(config.values, lc.protocols, [e.name for e in lc.listeners]))


def test_each_listener_gets_its_protocol(tmp_path: Path) -> None:
    ca = CertificateAuthority.create()
    keystore = tmp_path / "keystore.pem"
    keystore.write_bytes(ca.issue("b1", ["localhost", "127.0.0.1"]))
    got = securities(
        "listeners=PLAINTEXT://:0,SSL://:0,SASL_PLAINTEXT://:0,SASL_SSL://:0",
        f"ssl.keystore.location={keystore}",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,PLAIN",
    )
    summary = {name: (s.tls, s.sasl_mechanisms) for name, s in got.items()}  # type: ignore[attr-defined]
    assert summary == {
        "PLAINTEXT": (False, ()),
        "SSL": (True, ()),
        "SASL_PLAINTEXT": (False, ("SCRAM-SHA-256", "PLAIN")),
        "SASL_SSL": (True, ("SCRAM-SHA-256", "PLAIN")),
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["listeners=SSL://:0"], "ssl.keystore.location is required"),
        (["listeners=SSL://:0", "ssl.keystore.location=/nonexistent.pem"], "cannot load key and certificate"),
        (["listeners=SSL://:0", "ssl.keystore.type=JKS", "ssl.keystore.location=x"], "PEM files only"),
        (["listeners=SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms=GSSAPI"], "GSSAPI is not supported"),
    ],
)
def test_bad_listener_security_names_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        securities(*overrides)


def test_inter_broker_client_security_from_jaas() -> None:
    values = {
        "sasl.jaas.config": jaas_config("broker", 'p"w'),
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "ssl.truststore.location": "/ca.pem",
    }
    sec = inter_broker_client_security(values, "SASL_SSL")
    assert (sec.username, sec.password, sec.ca_location, sec.tls, sec.sasl) == (
        "broker",
        'p"w',
        "/ca.pem",
        True,
        True,
    )
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config"):
        inter_broker_client_security({}, "SASL_PLAINTEXT")
    plain = {**values, "sasl.jaas.config": values["sasl.jaas.config"].replace("scram.Scram", "plain.Plain")}
    with pytest.raises(ConfigError, match="PLAIN"):
        inter_broker_client_security(plain, "SASL_SSL")
    assert not inter_broker_client_security({}, "PLAINTEXT").sasl


def test_client_properties_librdkafka_and_java_keys(tmp_path: Path) -> None:
    librdkafka = tmp_path / "a.properties"
    librdkafka.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=u\nsasl.password=p\nssl.ca.location=ca.pem\n"
    )
    a = ClientSecurity.from_file(librdkafka)
    assert (a.security_protocol, a.sasl_mechanism, a.username, a.password) == ("SASL_SSL", "PLAIN", "u", "p")
    assert a.ca_location == str(tmp_path / "ca.pem")
    java = tmp_path / "b.properties"
    java.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config={jaas_config('v', 'q')}\n"
    )
    b = ClientSecurity.from_file(java)
    assert (b.username, b.password, b.tls) == ("v", "q", False)
    assert b.with_user("w", "r").username == "w"
    bad = tmp_path / "c.properties"
    bad.write_text("security.protocol=SASL_SSL\n")
    with pytest.raises(SecurityConfigError, match=r"sasl\.username"):
        ClientSecurity.from_file(bad)
    with pytest.raises(SecurityConfigError, match="login module"):
        parse_jaas_config('com.example.Other required username="x";')
