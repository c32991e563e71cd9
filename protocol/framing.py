"""Wire framing (docs/protocol.md): ``uint32 big-endian length N`` then N bytes holding one msgpack value.

Sans-I/O: :class:`FrameDecoder` turns received bytes into frame payloads, the ``encode_*`` functions turn
messages into bytes to send, ``decode_request`` / ``decode_response`` check the header shape. A payload that
is not valid msgpack or a header of the wrong shape raises :class:`InvalidFrame`; the caller closes the
connection (docs/protocol.md's rule). Body schemas are checked elsewhere (``protocol.schema``).

Request:  ``{"api_key": int, "api_version": int, "correlation_id": int32, "client_id": str, "body": map}``
Response: ``{"correlation_id": int32, "body": map}``
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes

_LENGTH = struct.Struct(">I")
_LENGTH_SIZE = _LENGTH.size
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
# The consumed prefix of the decoder's buffer is dropped once it is at least this large and at least half
# of the buffer: amortised O(1) per byte, without moving bytes after every small frame.
_COMPACT_THRESHOLD = 64 * 1024


class FrameTooLarge(Exception):
    """A length prefix above the limit (``socket.request.max.bytes``): the connection must be closed."""


class InvalidFrame(Exception):
    """A frame that is not one msgpack value of the expected shape; the message says why."""


def pack(obj: Any) -> bytes:
    """msgpack with ``bin`` for bytes and ``str`` for text."""
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def encode_frame(obj: Any) -> bytes:
    """A whole frame: length prefix + msgpack of ``obj``."""
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return _LENGTH.pack(len(payload)) + payload


def encode_frame_parts(obj: Any) -> tuple[bytes, bytes]:
    """A whole frame as (length prefix, msgpack of ``obj``), to be written one after the other: a large frame
    (a FETCH response with a MiB of records) is not copied once more just to put 4 bytes in front of it."""
    payload: bytes = msgpack.packb(obj, use_bin_type=True)
    return _LENGTH.pack(len(payload)), payload


class FrameDecoder:
    """Splits a byte stream into frame payloads.

    ``feed`` appends received bytes; ``next_frame`` returns the payload of the next complete frame, or
    ``None`` until more bytes arrive (a large frame that ends the bytes received is returned as the
    ``bytearray`` it was received into, without a copy). A length prefix above ``max_frame_bytes`` raises
    :class:`FrameTooLarge` as soon as the prefix has arrived (the payload is never buffered). Bytes are
    appended to one growing buffer and each payload is copied out at most once, so a 100 MB frame in many
    chunks costs linear time, and many small frames in one chunk are sliced out without moving the rest of
    the buffer.
    """

    __slots__ = ("_buf", "_need", "_pos", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        self._need = -1  # payload length of the frame being assembled, -1 while the prefix is incomplete

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    @property
    def pending_frame_bytes(self) -> int:
        """The payload length of a frame whose prefix has arrived but not all of its bytes (-1 if none)."""
        return self._need

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        self._buf += data

    def next_frame(self) -> bytes | bytearray | None:
        buf = self._buf
        pos = self._pos
        need = self._need
        if need < 0:
            if len(buf) - pos < _LENGTH_SIZE:
                return None
            (need,) = _LENGTH.unpack_from(buf, pos)
            if need > self.max_frame_bytes:
                raise FrameTooLarge(
                    f"frame of {need} bytes exceeds the limit of {self.max_frame_bytes} bytes"
                )
            pos += _LENGTH_SIZE
            self._pos = pos
            self._need = need
        if len(buf) - pos < need:
            return None
        end = pos + need
        self._need = -1
        if end == len(buf) and need >= _COMPACT_THRESHOLD:
            # A large frame that ends the buffer: hand the buffer itself over instead of copying the frame out
            # (deleting from the front of a bytearray moves no bytes) and start a new one.
            del buf[:pos]
            self._buf = bytearray()
            self._pos = 0
            return buf
        with memoryview(buf) as view, view[pos:end] as part:
            payload = bytes(part)  # one copy; the views are released before the buffer is resized
        if end == len(buf):
            buf.clear()
            self._pos = 0
        elif end >= _COMPACT_THRESHOLD and end * 2 >= len(buf):
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return payload


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str


def _unpack(payload: bytes | bytearray | memoryview) -> Any:
    try:
        return msgpack.unpackb(payload, raw=False, strict_map_key=True, use_list=True)
    except Exception as exc:  # ExtraData, FormatError, StackError, invalid UTF-8, bad map keys ...
        raise InvalidFrame(f"not one valid msgpack value: {type(exc).__name__}: {exc}") from exc


def _type_name(value: Any) -> str:
    return "nil" if value is None else type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _correlation_id(msg: dict[str, Any]) -> int:
    if "correlation_id" not in msg:
        raise InvalidFrame("header has no 'correlation_id'")
    cid = msg["correlation_id"]
    if not _is_int(cid):
        raise InvalidFrame(f"header 'correlation_id' must be int32, got {_type_name(cid)}")
    if not _INT32_MIN <= cid <= _INT32_MAX:
        raise InvalidFrame(f"header 'correlation_id' {cid} is out of int32 range")
    return int(cid)


def _body(msg: dict[str, Any]) -> dict[str, Any]:
    if "body" not in msg:
        raise InvalidFrame("header has no 'body'")
    body = msg["body"]
    if type(body) is not dict:
        raise InvalidFrame(f"'body' must be a map, got {_type_name(body)}")
    return body


def decode_request(payload: bytes | bytearray | memoryview) -> tuple[RequestHeader, dict[str, Any]]:
    """Check a request frame's shape and split it into header and (unvalidated) body."""
    msg = _unpack(payload)
    if type(msg) is not dict:
        raise InvalidFrame(f"request must be a map, got {_type_name(msg)}")
    for name in ("api_key", "api_version"):
        if name not in msg:
            raise InvalidFrame(f"header has no '{name}'")
        if not _is_int(msg[name]):
            raise InvalidFrame(f"header '{name}' must be int, got {_type_name(msg[name])}")
    correlation_id = _correlation_id(msg)
    client_id = msg.get("client_id")
    if client_id is None:
        client_id = ""
    elif type(client_id) is not str:
        raise InvalidFrame(f"header 'client_id' must be str or nil, got {_type_name(client_id)}")
    body = _body(msg)
    return RequestHeader(int(msg["api_key"]), int(msg["api_version"]), correlation_id, client_id), body


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str, body: dict[str, Any]
) -> bytes:
    """A whole request frame."""
    return encode_frame(
        {
            "api_key": int(api_key),
            "api_version": api_version,
            "correlation_id": correlation_id,
            "client_id": client_id,
            "body": body,
        }
    )


def encode_response(correlation_id: int, body: dict[str, Any]) -> bytes:
    """A whole response frame."""
    return encode_frame({"correlation_id": correlation_id, "body": body})


def encode_response_parts(correlation_id: int, body: dict[str, Any]) -> tuple[bytes, bytes]:
    """A whole response frame as (length prefix, payload): see :func:`encode_frame_parts`."""
    return encode_frame_parts({"correlation_id": correlation_id, "body": body})


def decode_response(payload: bytes | bytearray | memoryview) -> tuple[int, dict[str, Any]]:
    """Check a response frame's shape; returns ``(correlation_id, body)``."""
    msg = _unpack(payload)
    if type(msg) is not dict:
        raise InvalidFrame(f"response must be a map, got {_type_name(msg)}")
    return _correlation_id(msg), _body(msg)


def is_kafka_frame(payload: bytes | bytearray | memoryview) -> bool:
    """A Kafka request starts with its int16 api_key, whose first byte is 0x00 for every key below 256; a
    msgpack request is a map (0x8N, 0xde, 0xdf). docs/clients.md chooses the encoding by this byte (here, so
    that a server can tell without loading Kafka's codec, :mod:`protocol.kafka_codec`)."""
    return len(payload) > 0 and payload[0] == 0


__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES",
    "FrameDecoder",
    "FrameTooLarge",
    "InvalidFrame",
    "RequestHeader",
    "decode_request",
    "decode_response",
    "encode_frame",
    "encode_request",
    "encode_response",
    "is_kafka_frame",
    "pack",
]
