from __future__ import annotations

import struct
from typing import Any

import msgpack
import pytest

from protocol.framing import (
    DEFAULT_MAX_REQUEST_BYTES,
    FrameDecoder,
    FrameTooLarge,
    InvalidFrame,
    RequestHeader,
    decode_request,
    decode_response,
    encode_frame,
    encode_request,
    encode_response,
    pack,
)


def frames_of(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (frame := decoder.next_frame()) is not None:
        out.append(frame)
    return out


def request_payload(**fields: Any) -> bytes:
    msg: dict[str, Any] = {"api_key": 1, "api_version": 0, "correlation_id": 7, "client_id": "c", "body": {}}
    for k, v in fields.items():
        if v is _DROP:
            del msg[k]
        else:
            msg[k] = v
    return pack(msg)


_DROP = object()


def test_encode_frame_layout() -> None:
    frame = encode_frame({"a": b"\x00"})
    payload = msgpack.packb({"a": b"\x00"}, use_bin_type=True)
    assert frame == struct.pack(">I", len(payload)) + payload
    assert frame[4:] == b"\x81\xa1a\xc4\x01\x00"  # map{str "a": bin8 [0]}
    assert DEFAULT_MAX_REQUEST_BYTES == 104857600


def test_request_round_trip() -> None:
    frame = encode_request(1, 0, 99, "me", {"x": [1, b"y"]})
    decoder = FrameDecoder()
    decoder.feed(frame)
    header, body = decode_request(decoder.next_frame() or b"")
    assert header == RequestHeader(1, 0, 99, "me")
    assert body == {"x": [1, b"y"]}
    assert decoder.next_frame() is None
    assert decoder.buffered == 0


def test_response_round_trip() -> None:
    payload = encode_response(-5, {"error_code": 0, "records": b"\x01"})[4:]
    assert decode_response(payload) == (-5, {"error_code": 0, "records": b"\x01"})


def test_split_into_single_bytes() -> None:
    frames = [encode_request(0, 0, i, "c", {"i": i}) for i in range(3)]
    stream = b"".join(frames)
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got.extend(frames_of(decoder))
    assert [decode_request(f)[0].correlation_id for f in got] == [0, 1, 2]


def test_many_frames_in_one_chunk() -> None:
    n = 20_000
    stream = b"".join(encode_frame({"n": i}) for i in range(n))
    decoder = FrameDecoder()
    decoder.feed(stream + encode_frame({"n": n})[:3])
    got = frames_of(decoder)
    assert [msgpack.unpackb(f)["n"] for f in got] == list(range(n))
    assert decoder.buffered == 3
    decoder.feed(encode_frame({"n": n})[3:])
    assert msgpack.unpackb(decoder.next_frame())["n"] == n


def test_large_frame_in_many_chunks() -> None:
    blob = bytes(range(256)) * 40_000  # ~10 MB
    frame = encode_frame({"b": blob})
    decoder = FrameDecoder()
    step = 65_536
    results = []
    for i in range(0, len(frame), step):
        decoder.feed(memoryview(frame)[i : i + step])
        results.extend(frames_of(decoder))
    assert len(results) == 1
    assert msgpack.unpackb(results[0])["b"] == blob


def test_oversized_prefix_raises_before_payload_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.feed(encode_frame(b"x" * 90))
    assert decoder.next_frame() is not None
    decoder.feed(struct.pack(">I", 101))
    with pytest.raises(FrameTooLarge, match="101"):
        decoder.next_frame()


def test_exact_limit_is_allowed() -> None:
    decoder = FrameDecoder(max_frame_bytes=5)
    decoder.feed(struct.pack(">I", 5) + b"\x01\x02\x03\x04\x05")
    assert decoder.next_frame() == b"\x01\x02\x03\x04\x05"


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # empty frame
        b"\xc1",  # reserved byte
        b"\x81\xa1a",  # truncated map
        pack({"api_key": 1}) + b"\x00",  # extra data after the value
        b"\x81\xa2\xff\xfe\x01",  # invalid UTF-8 key
    ],
)
def test_garbage_msgpack_is_invalid_frame(payload: bytes) -> None:
    with pytest.raises(InvalidFrame, match="msgpack"):
        decode_request(payload)
    with pytest.raises(InvalidFrame):
        decode_response(payload)


def test_non_string_map_keys_rejected() -> None:
    payload = msgpack.packb({1: 2}, use_bin_type=True)
    with pytest.raises(InvalidFrame):
        decode_request(payload)
    nested = request_payload(body={3: "x"})
    with pytest.raises(InvalidFrame):
        decode_request(nested)


@pytest.mark.parametrize("value", [[1, 2], "str", 3, None, b"bin"])
def test_non_map_header(value: Any) -> None:
    with pytest.raises(InvalidFrame, match="must be a map"):
        decode_request(pack(value))
    with pytest.raises(InvalidFrame, match="must be a map"):
        decode_response(pack(value))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"api_key": "1"}, "'api_key' must be int, got str"),
        ({"api_key": True}, "'api_key' must be int, got bool"),
        ({"api_key": _DROP}, "no 'api_key'"),
        ({"api_version": 1.0}, "'api_version' must be int, got float"),
        ({"correlation_id": 2**31}, "out of int32 range"),
        ({"correlation_id": -(2**31) - 1}, "out of int32 range"),
        ({"correlation_id": None}, "'correlation_id' must be int32, got nil"),
        ({"correlation_id": _DROP}, "no 'correlation_id'"),
        ({"client_id": b"bytes"}, "'client_id' must be str or nil, got bytes"),
        ({"body": [1]}, "'body' must be a map, got list"),
        ({"body": None}, "'body' must be a map, got nil"),
        ({"body": _DROP}, "no 'body'"),
    ],
)
def test_bad_header_fields(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidFrame, match=message):
        decode_request(request_payload(**fields))


def test_nil_or_missing_client_id_is_empty() -> None:
    assert decode_request(request_payload(client_id=None))[0].client_id == ""
    assert decode_request(request_payload(client_id=_DROP))[0].client_id == ""


def test_int32_bounds_accepted() -> None:
    assert decode_request(request_payload(correlation_id=2**31 - 1))[0].correlation_id == 2**31 - 1
    assert decode_response(pack({"correlation_id": -(2**31), "body": {}})) == (-(2**31), {})


def test_bad_response_shapes() -> None:
    with pytest.raises(InvalidFrame, match="no 'correlation_id'"):
        decode_response(pack({"body": {}}))
    with pytest.raises(InvalidFrame, match="'body' must be a map"):
        decode_response(pack({"correlation_id": 1, "body": 3}))
