"""`isrsim produce`, `consume` and `topic` as Kafka's console tools: records read from stdin with
kafka-console-producer's properties, printed with kafka-console-consumer's, checked against kcat."""

from __future__ import annotations

import subprocess

import pytest

from kit.console import partition_for_key
from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import Cluster
from tests.integration.harness import python_cmd, wait_until

pytestmark = pytest.mark.integration

PARTITIONS = 3


def isrsim(cluster: Cluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        python_cmd(*args, "--data-dir", str(cluster.root)),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def make_topic(cluster: Cluster, name: str) -> None:
    cluster.cli(
        "topic", "create", "--topic", name, "--partitions", str(PARTITIONS), "--replication-factor", "3"
    )


def test_produce_reads_stdin_with_keys_and_headers_as_the_console_producer(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "stdin")
    lines = [f"app:web,n:{i}\tkey-{i % 5}\tvalue {i}" for i in range(40)]
    out = isrsim(
        kafka_cluster,
        "produce", "stdin", "--property", "parse.key=true", "--property", "parse.headers=true",
        stdin="\n".join(lines) + "\n",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # the summary goes to stderr, as the console producer prints nothing
    assert "40 records acknowledged" in out.stderr
    got = kcat("-C", "-b", bootstrap(kafka_cluster), "-t", "stdin", "-e", "-q", "-f", "%p|%k|%h|%s\n")
    assert got.returncode == 0, got.stderr
    rows = sorted(tuple(line.split("|")) for line in got.stdout.splitlines())
    assert len(rows) == 40
    for partition, key, headers, value in rows:
        i = int(value.split()[1])
        assert key == f"key-{i % 5}"
        assert headers == f"app=web,n={i}"
        # Kafka's default partitioner: murmur2 of the key, as a Java producer would place it.
        assert int(partition) == partition_for_key(key.encode(), PARTITIONS)


def test_produce_to_one_partition_with_another_key_separator(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "onepart")
    out = isrsim(
        kafka_cluster,
        "produce", "onepart", "--partition", "2",
        "--property", "parse.key=true", "--property", "key.separator=:",
        stdin="a:1\nb:2\nc:3\n",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = kcat("-C", "-b", bootstrap(kafka_cluster), "-t", "onepart", "-e", "-q", "-f", "%p %k %s\n")
    assert sorted(got.stdout.splitlines()) == ["2 a 1", "2 b 2", "2 c 3"]


def test_a_line_without_its_key_separator_is_named(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "badline")
    out = isrsim(kafka_cluster, "produce", "badline", "--property", "parse.key=true", stdin="k\tv\nno-key\n")
    assert out.returncode == 1
    assert "No key separator found on line number 2" in out.stderr
    assert "Traceback" not in out.stderr


def test_consume_prints_kafkas_fields_tab_separated_value_last(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "printed")
    sent = kcat(
        "-P", "-b", bootstrap(kafka_cluster), "-t", "printed", "-p", "1",
        "-K", ":", "-H", "h1=x", "-H", "h2=y",
        stdin="k1:v1\nk2:v2\n",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    out = isrsim(
        kafka_cluster,
        "consume", "printed", "--from-beginning", "--max-messages", "2",
        "--property", "print.key=true", "--property", "print.headers=true",
        "--property", "print.offset=true", "--property", "print.partition=true",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "Partition:1\tOffset:0\th1:x,h2:y\tk1\tv1",
        "Partition:1\tOffset:1\th1:x,h2:y\tk2\tv2",
    ]


def test_consume_one_partition_from_an_offset(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "offsets")
    sent = kcat("-P", "-b", bootstrap(kafka_cluster), "-t", "offsets", "-p", "0", stdin="a\nb\nc\nd\n")
    assert sent.returncode == 0, sent.stderr
    out = isrsim(kafka_cluster, "consume", "offsets", "--partition", "0", "--offset", "2", "-e")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["c", "d"]
    earliest = isrsim(kafka_cluster, "consume", "offsets", "--partition", "0", "--offset", "earliest", "-e")
    assert earliest.stdout.splitlines() == ["a", "b", "c", "d"]
    refused = isrsim(kafka_cluster, "consume", "offsets", "--offset", "2", "-e")
    assert refused.returncode == 2 and "--offset needs --partition" in refused.stderr


def test_topic_describe_filters_print_nothing_when_nothing_matches(kafka_cluster: Cluster) -> None:
    make_topic(kafka_cluster, "healthy")
    wait_until(lambda: kafka_cluster.isr_full("healthy"), timeout=30, message="every replica in the ISR")
    out = isrsim(kafka_cluster, "topic", "describe", "--topic", "healthy", "--under-replicated-partitions")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""
    described = isrsim(kafka_cluster, "topic", "describe", "--topic", "healthy")
    assert "Topic: healthy\tPartitionCount: 3" in described.stdout
