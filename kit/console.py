"""Kafka's console tools' record formats, pure: a line of kafka-console-producer's input into a record
(``LineMessageReader``: ``parse.key``, ``key.separator``, ``parse.headers``, ``headers.delimiter``,
``headers.separator``, ``headers.key.separator``, ``ignore.error``, ``null.marker``), a record into a line of
kafka-console-consumer's output (``DefaultMessageFormatter``: ``print.timestamp``, ``print.partition``,
``print.offset``, ``print.headers``, ``print.key``, ``print.value``, ``key.separator``, ``headers.separator``,
``line.separator``, ``null.literal``), and Kafka's default partitioner for keyed records (murmur2)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Header = tuple[str, bytes | None]

READER_KEYS = frozenset(
    {
        "parse.key",
        "key.separator",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "ignore.error",
        "null.marker",
    }
)
FORMATTER_KEYS = frozenset(
    {
        "print.timestamp",
        "print.partition",
        "print.offset",
        "print.headers",
        "print.key",
        "print.value",
        "key.separator",
        "line.separator",
        "headers.separator",
        "null.literal",
    }
)


class PropertyError(ValueError):
    """A ``--property`` that is malformed, unknown, or contradicts another; or a line that does not parse."""


def parse_properties(
    items: Iterable[str], known: frozenset[str], option: str = "--property"
) -> dict[str, str]:
    """``key=value`` items (each ``--property``) as a dict; an unknown key or an item without ``=`` is
    refused."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PropertyError(f"{option} {item!r}: expected key=value")
        if key not in known:
            raise PropertyError(f"{option} {key}: unknown property (known: {', '.join(sorted(known))})")
        out[key] = value
    return out


def _flag(props: Mapping[str, str], key: str, default: bool) -> bool:
    return props[key].strip().lower() == "true" if key in props else default


# ------------------------------------------------------------------------------------------------ producer


@dataclass(frozen=True)
class LineRecord:
    """A record read from one line: its headers, key and value (None: the null marker)."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True)
class LineReader:
    """kafka-console-producer's ``LineMessageReader``: headers, key and value from a line."""

    parse_key: bool = False
    key_separator: str = "\t"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    ignore_error: bool = False
    null_marker: str | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LineReader:
        reader = cls(
            parse_key=_flag(props, "parse.key", False),
            key_separator=props.get("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers", False),
            headers_delimiter=props.get("headers.delimiter", "\t"),
            headers_separator=props.get("headers.separator", ","),
            headers_key_separator=props.get("headers.key.separator", ":"),
            ignore_error=_flag(props, "ignore.error", False),
            null_marker=props.get("null.marker"),
        )
        reader.check()
        return reader

    def check(self) -> None:
        """Kafka's rules: the separators must differ from each other and from the null marker."""
        pairs = [
            ("headers.delimiter", self.headers_delimiter, "headers.separator", self.headers_separator),
            (
                "headers.delimiter",
                self.headers_delimiter,
                "headers.key.separator",
                self.headers_key_separator,
            ),
            (
                "headers.separator",
                self.headers_separator,
                "headers.key.separator",
                self.headers_key_separator,
            ),
        ]
        if self.null_marker is not None:
            pairs += [
                ("null.marker", self.null_marker, name, value)
                for name, value in [
                    ("key.separator", self.key_separator),
                    ("headers.separator", self.headers_separator),
                    ("headers.delimiter", self.headers_delimiter),
                    ("headers.key.separator", self.headers_key_separator),
                ]
            ]
        for a, va, b, vb in pairs:
            if va == vb:
                raise PropertyError(f"{a} and {b} may not be equal")
        for name, value in [
            ("key.separator", self.key_separator),
            ("headers.delimiter", self.headers_delimiter),
        ]:
            if not value:
                raise PropertyError(f"{name} may not be empty")

    def _field(self, enabled: bool, line: str, start: int, sep: str, what: str, number: int) -> str | None:
        if not enabled:
            return None
        index = line.find(sep, start)
        if index == -1:
            if self.ignore_error:
                return None
            raise PropertyError(f"No {what} found on line number {number}: {line!r}")
        return line[start:index]

    def _bytes(self, text: str) -> bytes | None:
        return None if text == self.null_marker else text.encode("utf-8")

    def read(self, line: str, number: int = 1) -> LineRecord:
        """The record of one line (without its line break); ``number`` is for the error message."""
        headers = self._field(
            self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number
        )
        at = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._field(self.parse_key, line, at, self.key_separator, "key separator", number)
        at += 0 if key is None else len(key) + len(self.key_separator)
        return LineRecord(
            value=self._bytes(line[at:]),
            key=None if key is None else self._bytes(key),
            headers=() if headers is None or headers == self.null_marker else self._headers(headers, number),
        )

    def _headers(self, text: str, number: int) -> tuple[Header, ...]:
        out: list[Header] = []
        for pair in text.split(self.headers_separator):
            i = pair.find(self.headers_key_separator)
            if i == -1:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise PropertyError(f"No header key separator found in pair {pair!r} on line number {number}")
            name = pair[:i]
            if name == self.null_marker:
                raise PropertyError(
                    f"Header keys should not be equal to the null marker {self.null_marker!r} "
                    "as they can't be null"
                )
            out.append((name, self._bytes(pair[i + len(self.headers_key_separator) :])))
        return tuple(out)


# ------------------------------------------------------------------------------------------------ consumer


@dataclass(frozen=True)
class Formatter:
    """kafka-console-consumer's ``DefaultMessageFormatter``: the chosen fields in Kafka's order (timestamp,
    partition, offset, headers, key, value), separated by ``key.separator``; a null as ``null.literal``."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> Formatter:
        return cls(
            print_timestamp=_flag(props, "print.timestamp", False),
            print_partition=_flag(props, "print.partition", False),
            print_offset=_flag(props, "print.offset", False),
            print_headers=_flag(props, "print.headers", False),
            print_key=_flag(props, "print.key", False),
            print_value=_flag(props, "print.value", True),
            key_separator=props.get("key.separator", "\t"),
            line_separator=props.get("line.separator", "\n"),
            headers_separator=props.get("headers.separator", ","),
            null_literal=props.get("null.literal", "null"),
        )

    def _text(self, data: bytes | None) -> str:
        return self.null_literal if data is None else data.decode("utf-8", "replace")

    def format(
        self,
        *,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] = (),
    ) -> str:
        """One record as the console consumer prints it, its line separator included."""
        parts: list[str] = []
        if self.print_timestamp:
            parts.append(f"CreateTime:{timestamp}" if timestamp >= 0 else "NO_TIMESTAMP")
        if self.print_partition:
            parts.append(f"Partition:{partition}")
        if self.print_offset:
            parts.append(f"Offset:{offset}")
        if self.print_headers:
            parts.append(
                self.headers_separator.join(f"{k}:{self._text(v)}" for k, v in headers)
                if headers
                else "NO_HEADERS"
            )
        if self.print_key:
            parts.append(self._text(key))
        if self.print_value:
            parts.append(self._text(value))
        # A column separator between fields, a line separator after the last (nothing for no field).
        return self.key_separator.join(parts) + self.line_separator if parts else ""


# ------------------------------------------------------------------------------------------------ partitioner


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data`` with Kafka's seed, as a signed int."""
    m = 0x5BD1E995
    r = 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
