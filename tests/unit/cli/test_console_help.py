"""``isrsim produce --help`` and ``consume --help`` read as kafka-console-producer's and -consumer's: they say
first that lines go from stdin to the topic (and records from the topic to stdout), and the console options
(--property, --partition, --offset) come before the load generator's."""

from __future__ import annotations

import re

from click.testing import CliRunner

from cli.workload_cmd import consume, produce


def _help(command: object) -> str:
    result = CliRunner().invoke(command, ["--help"], terminal_width=110)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    return result.output


def _summary(text: str) -> str:
    """The text above the options as one line (click wraps at hyphens: ``kafka-console-`` / ``producer``)."""
    return re.sub(r"-\s+", "-", " ".join(text.split("Options:")[0].split()))


def _order(text: str, *options: str) -> list[int]:
    options_part = text[text.index("Options:") :]
    return [options_part.index(f"  {o} ") for o in options]


def test_produce_help_reads_like_kafka_console_producer() -> None:
    text = _help(produce)
    summary = _summary(text)
    assert "Read lines from standard input and produce each as a record to TOPIC" in summary
    assert "kafka-console-producer" in summary and "parse.key=true" in summary
    at = _order(text, "--count", "--property", "--partition", "--acks", "--record-size", "--batch-records")
    assert at == sorted(at), text


def test_consume_help_reads_like_kafka_console_consumer() -> None:
    text = _help(consume)
    summary = _summary(text)
    assert "print them on standard output, one per line, as kafka-console-consumer does" in summary
    at = _order(text, "--from-beginning", "--partition", "--offset", "--property", "--print-offsets")
    assert at == sorted(at), text
