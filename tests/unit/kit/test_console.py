"""Kafka's console formats: kafka-console-producer's line reader, kafka-console-consumer's default formatter
and the default partitioner's murmur2, each against what Kafka's own code does."""

from __future__ import annotations

import pytest

from kit.console import (
    FORMATTER_KEYS,
    READER_KEYS,
    Formatter,
    LineReader,
    LineRecord,
    PropertyError,
    murmur2,
    parse_properties,
    partition_for_key,
)


def reader(*props: str) -> LineReader:
    return LineReader.from_properties(parse_properties(props, READER_KEYS))


def test_a_plain_line_is_the_value() -> None:
    assert reader().read("hello\tworld") == LineRecord(value=b"hello\tworld")


def test_parse_key_splits_at_the_first_separator_tab_by_default() -> None:
    assert reader("parse.key=true").read("k1\tv\t1") == LineRecord(value=b"v\t1", key=b"k1")
    assert reader("parse.key=true", "key.separator=:").read("k:v:1") == LineRecord(value=b"v:1", key=b"k")


def test_headers_come_before_the_key() -> None:
    got = reader("parse.headers=true", "parse.key=true").read("h1:a,h2:b\tk\tv")
    assert got == LineRecord(value=b"v", key=b"k", headers=(("h1", b"a"), ("h2", b"b")))


def test_a_missing_separator_names_the_line() -> None:
    with pytest.raises(PropertyError, match="No key separator found on line number 7"):
        reader("parse.key=true").read("no-separator", 7)
    assert reader("parse.key=true", "ignore.error=true").read("no-separator") == LineRecord(
        value=b"no-separator"
    )


def test_the_null_marker_makes_a_null_key_or_value() -> None:
    got = reader("parse.key=true", "null.marker=<null>").read("<null>\t<null>")
    assert got == LineRecord(value=None, key=None)


def test_equal_separators_are_refused_as_kafka_does() -> None:
    with pytest.raises(PropertyError, match=r"headers\.delimiter and headers\.separator may not be equal"):
        reader("headers.delimiter=,")
    with pytest.raises(PropertyError, match="unknown property"):
        reader("parse.keys=true")
    with pytest.raises(PropertyError, match="expected key=value"):
        reader("parse.key")


def test_the_formatter_prints_kafkas_fields_in_kafkas_order() -> None:
    fmt = Formatter.from_properties(
        parse_properties(
            ["print.key=true", "print.headers=true", "print.offset=true", "print.partition=true"],
            FORMATTER_KEYS,
        )
    )
    line = fmt.format(
        partition=2, offset=41, timestamp=5, key=b"k", value=b"v", headers=[("h", b"x"), ("g", None)]
    )
    assert line == "Partition:2\tOffset:41\th:x,g:null\tk\tv\n"
    assert (
        fmt.format(partition=0, offset=0, timestamp=5, key=None, value=b"v")
        == "Partition:0\tOffset:0\tNO_HEADERS\tnull\tv\n"
    )


def test_the_default_formatter_prints_the_value_alone() -> None:
    assert Formatter().format(partition=0, offset=0, timestamp=0, key=b"k", value=b"v") == "v\n"
    no_value = Formatter(print_key=True, print_value=False)
    assert no_value.format(partition=0, offset=0, timestamp=0, key=b"k", value=b"v") == "k\n"


def test_murmur2_matches_kafkas_test_vectors() -> None:
    # Kafka's UtilsTest.testMurmur2.
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    assert {k: murmur2(k) for k in cases} == cases
    assert partition_for_key(b"foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6
