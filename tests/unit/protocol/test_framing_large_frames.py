"""Large frames through ``FrameDecoder`` and ``encode_frame_parts``: a frame that ends the bytes received is
handed over without a copy, and whatever comes after it is still split correctly."""

from __future__ import annotations

import msgpack

from protocol.framing import (
    FrameDecoder,
    decode_response,
    encode_frame,
    encode_frame_parts,
    encode_response_parts,
)


def test_parts_are_the_frame() -> None:
    body = {"records": bytes(range(256)) * 1024, "n": 7}
    prefix, payload = encode_frame_parts(body)
    assert prefix + payload == encode_frame(body) and len(prefix) == 4
    cid, decoded = decode_response(encode_response_parts(3, body)[1])
    assert (cid, decoded) == (3, body)


def test_a_large_frame_in_chunks_then_small_frames() -> None:
    big = {"records": b"x" * (300 << 10)}
    small = [{"i": i} for i in range(3)]
    stream = encode_frame(big) + b"".join(encode_frame(s) for s in small)
    decoder = FrameDecoder()
    frames = []
    big_end = len(encode_frame(big))
    # The big frame arrives in 64 KiB chunks and its last chunk ends exactly with it; then the small ones.
    for start in range(0, big_end, 64 << 10):
        decoder.feed(stream[start : min(start + (64 << 10), big_end)])
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    assert len(frames) == 1 and isinstance(frames[0], bytearray)  # handed over, not copied
    decoder.feed(stream[big_end:])
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    assert [msgpack.unpackb(f) for f in frames] == [big, *small]
    assert decoder.buffered == 0
    # The handed-over buffer is the caller's: the decoder goes on with a buffer of its own.
    frames[0][:1] = b"\x00"
    decoder.feed(encode_frame({"after": True}))
    assert msgpack.unpackb(decoder.next_frame() or b"") == {"after": True}
