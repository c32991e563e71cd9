"""The librdkafka workload's pure parts: its configuration (Kafka's names and defaults, client.properties
on top), the properties file reader, and the one line that names what to install when confluent-kafka is
missing (before `isrsim demo` starts a cluster for nothing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import cli
from kit import librdkafka_producer
from kit.librdkafka_producer import LibrdkafkaMissing, producer_config, read_properties, require_librdkafka


def test_config_has_kafkas_names_and_the_properties_win(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(
        "# written by cluster up --secure\nsecurity.protocol=SASL_SSL\nsasl.mechanism = SCRAM-SHA-256\n\n"
        "sasl.password=a=b\n"
    )
    config = producer_config(
        [("127.0.0.1", 9092), ("127.0.0.1", 9093)], client_id="c", properties=read_properties(props)
    )
    assert config["bootstrap.servers"] == "127.0.0.1:9092,127.0.0.1:9093"
    assert (config["acks"], config["enable.idempotence"], config["linger.ms"]) == ("all", True, 5)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanism"] == "SCRAM-SHA-256"
    assert config["sasl.password"] == "a=b"  # split at the first '='
    # idempotence needs acks=all (Kafka's producer refuses the pair otherwise)
    assert producer_config([("h", 1)], client_id="c", acks="1")["enable.idempotence"] is False


def test_missing_confluent_kafka_is_named_before_a_cluster_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        librdkafka_producer.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "confluent_kafka" else real(name, *a),
    )
    with pytest.raises(LibrdkafkaMissing, match=r"pip install 'isrsim\[clients\]'"):
        require_librdkafka("x")
    result = CliRunner().invoke(cli, ["demo", "--data-dir", str(tmp_path / "root")])
    assert result.exit_code == 1
    assert "confluent-kafka is not installed" in result.output
    assert "--client isrsim" in result.output
    assert not (tmp_path / "root").exists()


def test_demo_client_choices() -> None:
    result = CliRunner().invoke(cli, ["demo", "--client", "java"])
    assert result.exit_code == 2
    assert "'librdkafka'" in result.output and "'isrsim'" in result.output
