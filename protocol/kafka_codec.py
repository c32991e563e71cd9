"""Apache Kafka's binary protocol (docs/clients.md), as a second encoding of the same bodies.

The bytes are read and written by kafka-python's schema-driven protocol module, which is generated from
Kafka's own JSON message schemas (every version, flexible versions and tagged fields). No API has a struct
written here. This module only maps, mechanically, between that library's message objects and the plain
bodies of docs/protocol.md (Kafka's JSON field names in snake_case), so a Kafka-encoded request becomes the
body a msgpack request carries, ``KafkaApis`` checks it with the same ``from_body`` and answers with the
same response dict, and this module writes that dict back at the request's version:

* a field of a message dataclass is read from the library's field of the same name, when the request's
  version has it (otherwise the dataclass default applies); nested dataclasses and lists of them recurse;
* a ``dict[str, str]`` field is Kafka's array of ``{name, value}`` structs (CreateTopics' configs);
* a response dict is written into the library's message of that version by the same names; fields the
  version lacks are dropped, fields the dict lacks take the schema's defaults;
* an error-only response (``{"error_code", "error_message"}``, what ``KafkaApis`` and the socket server send
  for a refused request) is spread over the request's topics and partitions as Kafka's
  ``AbstractRequest.getErrorResponse`` does, as the API's spec says (``protocol.api_specs.error_response``).

Framing: ``uint32`` length, then a request header v1 (api_key, api_version, correlation_id, client_id) or
v2 (the same plus tagged fields) by the API version's flexibility; responses carry header v0 (correlation
id) or v1 (plus tagged fields). ApiVersions' response header is always v0, and a version of ApiVersions the
broker does not know is answered with a version 0 body listing the supported ranges (KIP-511).
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
from kafka.protocol.api_header import RequestHeader as _KafkaRequestHeader
from kafka.protocol.api_message import ApiMessage

from protocol.api_keys import ApiKeys
from protocol.api_specs import error_response
from protocol.errors import Errors
from protocol.framing import InvalidFrame, RequestHeader, is_kafka_frame

__all__ = [
    "KafkaRequest",
    "decode_request",
    "encode_request",
    "encode_response_parts",
    "error_response",
    "is_kafka_frame",
    "schema_versions",
]

_LENGTH = struct.Struct(">I")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_CORRELATION = struct.Struct(">i")
_INT16 = struct.Struct(">h")


def _library_classes() -> tuple[dict[int, Any], dict[int, Any]]:
    """The library's request and response classes by API key (every module holding them imported above)."""
    # The imports are only for their side effect: each message class registers itself as a subclass.
    del kafka.protocol.admin, kafka.protocol.consumer, kafka.protocol.metadata, kafka.protocol.producer
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    todo: list[Any] = [ApiMessage]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__dict__.get("_json") is None or getattr(cls, "_class_version", None) is not None:
            continue
        (requests if cls.is_request() else responses)[int(cls.API_KEY)] = cls
    return requests, responses


_REQUESTS, _RESPONSES = _library_classes()


def schema_versions(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` that Kafka's JSON schemas describe (None: an API it does not know)."""
    cls = _REQUESTS.get(api_key)
    if cls is None:
        return None
    low, high = cls.valid_versions
    return int(low), int(high)


def _request_flexible(api_key: int, version: int) -> bool:
    cls = _REQUESTS.get(api_key)
    if cls is None:
        return False
    if version > cls.max_version:
        # Kafka reads a header of a version it does not know with the latest version's header (so that an
        # ApiVersions request from a newer client can be answered, KIP-511).
        version = cls.max_version
    return bool(cls.flexible_version_q(version))


def _response_flexible(api_key: int, version: int) -> bool:
    if api_key == ApiKeys.API_VERSIONS:
        return False  # always response header v0, so that any client can read the versions
    cls = _RESPONSES.get(api_key)
    return cls is not None and version <= cls.max_version and bool(cls.flexible_version_q(version))


@dataclass(slots=True)
class KafkaRequest:
    """A decoded Kafka request: the header, the plain body (Kafka's names; None when it was not decoded:
    an API or version the library does not describe) and why the body could not be read, if it could not."""

    header: RequestHeader
    body: dict[str, Any] | None
    error: str | None = None


def decode_request(payload: bytes | bytearray | memoryview, body_types: Mapping[int, type]) -> KafkaRequest:
    """Reads a Kafka request frame's payload. A header that cannot be read raises ``InvalidFrame`` (the
    connection is closed, as Kafka does). The body is read when the library knows the API and version
    (into ``body_types``' names where the API has one, else all of its fields); bytes that do not parse
    leave ``error`` set and ``body`` None."""
    view = memoryview(payload)
    if len(view) < _HEADER_FIXED.size + 2:
        raise InvalidFrame(f"Kafka request header needs at least 10 bytes, got {len(view)}")
    api_key, version, correlation_id = _HEADER_FIXED.unpack_from(view, 0)
    if api_key < 0 or version < 0:
        raise InvalidFrame(f"Kafka request header with api_key {api_key}, api_version {version}")
    flexible = _request_flexible(api_key, version)
    try:
        client_id, offset = _read_header_rest(view, flexible)
    except Exception as exc:  # truncated client_id or tagged fields ...
        raise InvalidFrame(f"Kafka request header does not parse: {type(exc).__name__}: {exc}") from exc
    header = RequestHeader(api_key, version, correlation_id, client_id or "")
    cls = _REQUESTS.get(api_key)
    if cls is None or version > cls.max_version:
        return KafkaRequest(header, None)
    try:
        message = cls.decode(view[offset:], version=version)
    except Exception as exc:  # struct.error, UnicodeDecodeError, ValueError, IndexError ...
        return KafkaRequest(header, None, f"{type(exc).__name__}: {exc}")
    target = body_types.get(api_key)
    try:
        body = _reader(target, cls._struct, version)(message) if target else message.to_dict(json=False)
        if api_key == ApiKeys.DELETE_TOPICS and version >= 6:
            # DeleteTopics v6 names topics as structs ({name, topic_id}); the body keeps the names.
            body["topic_names"] = [t.name for t in message.topics or ()]
    except Exception as exc:  # a value the mapping cannot take (it never should): a bad request, not a crash
        return KafkaRequest(header, None, f"{type(exc).__name__}: {exc}")
    return KafkaRequest(header, body)


def _read_header_rest(view: memoryview, flexible: bool) -> tuple[str | None, int]:
    """Request header v1/v2 after its fixed 8 bytes: ``client_id`` (a nullable int16-length string in both
    versions, as Kafka's RequestHeader.json says) and, in v2, the tagged fields, which are skipped.
    Returns the client id and where the body starts. Read here rather than through a stream so that a
    large request is never copied for its header."""
    (length,) = _INT16.unpack_from(view, 8)
    pos = 10
    client_id: str | None = None
    if length >= 0:
        if pos + length > len(view):
            raise ValueError(f"client_id of {length} bytes runs past the frame")
        # Kafka reads the header's strings as Java does (``new String(bytes, UTF_8)``): bytes that are not
        # UTF-8 become U+FFFD, and the request is served.
        client_id = bytes(view[pos : pos + length]).decode("utf-8", errors="replace")
        pos += length
    elif length != -1:
        raise ValueError(f"client_id length {length}")
    if flexible:
        count, pos = _uvarint(view, pos)
        for _ in range(count):
            _, pos = _uvarint(view, pos)  # tag
            size, pos = _uvarint(view, pos)
            pos += size
            if pos > len(view):
                raise ValueError("a tagged field runs past the frame")
    return client_id, pos


def _uvarint(view: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(view) or shift > 28:
            raise ValueError("truncated or overlong unsigned varint")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def encode_response_parts(
    header: RequestHeader,
    request_body: Mapping[str, Any] | None,
    body: Mapping[str, Any],
    *,
    api_versions: Mapping[int, tuple[int, int]] | None = None,
) -> tuple[bytes, bytes]:
    """The response frame to a Kafka request, as (length prefix, payload). ``body`` is the response
    dict; an error-only body is spread over the request's topics and partitions (see the module doc).
    ``api_versions`` is what an ApiVersions answer at an unsupported version lists."""
    api_key, version = header.api_key, header.api_version
    cls = _RESPONSES.get(api_key)
    if api_key == ApiKeys.API_VERSIONS and body.get("error_code", 0) == Errors.UNSUPPORTED_VERSION:
        version = 0  # KIP-511: a client reads an error ApiVersions answer as version 0
        if "api_keys" not in body and api_versions is not None:
            body = {**body, "api_keys": _api_keys(api_versions)}
    error_only = _is_error_only(body)
    if cls is None or version > cls.max_version:
        # An API or version no schema describes: the header and the error code alone (docs/clients.md).
        code = int(body.get("error_code", Errors.UNSUPPORTED_VERSION))
        payload = _CORRELATION.pack(header.correlation_id) + struct.pack(">h", code)
        return _LENGTH.pack(len(payload)), payload
    if error_only:
        body = error_response(api_key, request_body or {}, int(body["error_code"]), body.get("error_message"))
    message = _writer(cls, cls._struct, version)(body)
    encoded = message.encode(version=version)
    head = _CORRELATION.pack(header.correlation_id)
    if _response_flexible(api_key, version):
        head += b"\x00"  # response header v1: no tagged fields
    payload = head + encoded
    return _LENGTH.pack(len(payload)), payload


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
) -> bytes:
    """A whole Kafka request frame from a body (tests, and a client that wants Kafka's encoding)."""
    cls = _REQUESTS[api_key]
    message = _writer(cls, cls._struct, version)(body)
    header = _KafkaRequestHeader(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    payload: bytes = header.encode(flexible=_request_flexible(api_key, version))
    payload += message.encode(version=version)
    return _LENGTH.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, dict[str, Any]]:
    """A Kafka response payload (after the length) as (correlation_id, plain dict): for tests."""
    (correlation_id,) = _CORRELATION.unpack_from(payload, 0)
    offset = 5 if _response_flexible(api_key, version) else 4
    cls = _RESPONSES[api_key]
    if api_key == ApiKeys.API_VERSIONS and struct.unpack_from(">h", payload, offset)[0] != 0:
        version = 0
    message = cls.decode(memoryview(payload)[offset:], version=version)
    return correlation_id, message.to_dict(json=False)


# --------------------------------------------------------------------------------- library -> plain body

_Reader = Callable[[Any], dict[str, Any]]
_readers: dict[tuple[type, int, int], _Reader] = {}

_PLAIN, _STRUCT, _STRUCTS, _NAME_VALUES, _BITFIELD = range(5)
# Kafka's names of the authorized-operations bit fields (Metadata's topics and cluster, DescribeCluster,
# DescribeGroups' groups) and the value meaning "not requested"
_AUTHORIZED_OPERATIONS = (
    "authorized_operations",
    "topic_authorized_operations",
    "cluster_authorized_operations",
)
_NOT_REQUESTED = -(2**31)


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _kind(tp: Any) -> tuple[int, type | None]:
    """How a dataclass field's value maps: plain, a nested dataclass, a list of them, or name/value pairs."""
    tp = _strip_optional(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _STRUCT, tp
    origin = typing.get_origin(tp)
    if origin is list:
        (elem,) = typing.get_args(tp)
        elem = _strip_optional(elem)
        if dataclasses.is_dataclass(elem) and isinstance(elem, type):
            return _STRUCTS, elem
    if origin is dict:
        return _NAME_VALUES, None
    return _PLAIN, None


def _reader(cls: type, kstruct: Any, version: int) -> _Reader:
    key = (cls, id(kstruct), version)
    reader = _readers.get(key)
    if reader is None:
        reader = _build_reader(cls, kstruct, version)
        _readers[key] = reader
    return reader


def _build_reader(cls: type, kstruct: Any, version: int) -> _Reader:
    hints = typing.get_type_hints(cls, include_extras=True)
    steps: list[tuple[str, int, _Reader | None]] = []
    for f in dataclasses.fields(cls):
        kfield = kstruct.fields.get(f.name)
        if kfield is None or not kfield.for_version_q(version):
            continue  # not in this version: the dataclass default applies
        kind, sub = _kind(hints[f.name])
        if (
            kind in (_STRUCT, _STRUCTS)
            and sub is not None
            and (kfield.is_struct() or kfield.is_struct_array())
        ):
            steps.append((f.name, kind, _reader(sub, kfield, version)))
        elif kind == _NAME_VALUES and kfield.is_struct_array():
            steps.append((f.name, _NAME_VALUES, None))
        else:
            steps.append((f.name, _PLAIN, None))

    def read(message: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, kind, sub in steps:
            value = getattr(message, name)
            if value is None or kind == _PLAIN:
                out[name] = value
            elif kind == _STRUCTS:
                assert sub is not None
                out[name] = [sub(v) for v in value]
            elif kind == _STRUCT:
                assert sub is not None
                out[name] = sub(value)
            else:
                out[name] = {v.name: v.value for v in value}
        return out

    return read


# --------------------------------------------------------------------------------- plain body -> library

_Writer = Callable[[Mapping[str, Any]], Any]
_writers: dict[tuple[int, int], _Writer] = {}


def _writer(data_class: Any, kstruct: Any, version: int) -> _Writer:
    key = (id(kstruct), version)
    writer = _writers.get(key)
    if writer is None:
        writer = _build_writer(data_class, kstruct, version)
        _writers[key] = writer
    return writer


def _bit_positions(value: int) -> set[int] | None:
    """Kafka's int32 bit field of authorized operations as the library holds it (the set bit positions;
    None for Kafka's "not requested", -2147483648)."""
    if value == _NOT_REQUESTED:
        return None
    return {bit for bit in range(32) if value & (1 << bit)}


def _build_writer(data_class: Any, kstruct: Any, version: int) -> _Writer:
    steps: list[tuple[str, int, _Writer | None]] = []
    for name, kfield in kstruct.fields.items():
        if not kfield.for_version_q(version):
            continue
        if kfield.is_struct_array():
            steps.append((name, _STRUCTS, _writer(kfield.data_class, kfield, version)))
        elif kfield.is_struct():
            steps.append((name, _STRUCT, _writer(kfield.data_class, kfield, version)))
        elif getattr(kfield, "_type_str", None) == "bitfield":
            steps.append((name, _BITFIELD, None))
        else:
            steps.append((name, _PLAIN, None))

    def write(body: Mapping[str, Any]) -> Any:
        values: dict[str, Any] = {}
        for name, kind, sub in steps:
            if kind == _BITFIELD:
                # the library names Kafka's topic_/cluster_authorized_operations `authorized_operations`
                # and holds the bit positions; a body carries Kafka's names and the int32
                found = [body[k] for k in _AUTHORIZED_OPERATIONS if k in body]
                if found:
                    values[name] = _bit_positions(int(found[0]))
                continue
            if name not in body:
                continue
            value = body[name]
            if value is None and kind == _STRUCT:
                continue  # an absent struct (a FETCH partition's diverging_epoch): the schema's default
            if value is None or kind == _PLAIN:
                values[name] = value
            elif kind == _STRUCTS:
                assert sub is not None
                if isinstance(value, Mapping):  # name/value pairs (configs)
                    values[name] = [sub({"name": k, "value": v}) for k, v in value.items()]
                else:
                    values[name] = [sub(v) for v in value]
            else:
                assert sub is not None
                values[name] = sub(value)
        return data_class(version=version, **values)

    return write


# --------------------------------------------------------------------------------- error responses


def _is_error_only(body: Mapping[str, Any]) -> bool:
    return "error_code" in body and body.keys() <= {"error_code", "error_message"}


def _api_keys(versions: Mapping[int, tuple[int, int]]) -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(versions.items())]
