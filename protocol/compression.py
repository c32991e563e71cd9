"""Kafka's compression codecs for record batches (attributes bits 0-2), with the framing each has in Kafka.

- 0 ``none``: the records as they are.
- 1 ``gzip``: a gzip stream (RFC 1952), as Java's GZIPOutputStream writes; members are read one after
  another.
- 2 ``snappy``: written as the Java client frames it (xerial's ``SnappyOutputStream``: the 16-byte header
  ``\\x82SNAPPY\\x00``, version 1, compatible 1, then blocks of ``i32 length | raw snappy``, 32 KiB of input
  each); read in that framing or as one raw snappy block, as xerial's ``SnappyInputStream`` reads both.
- 3 ``lz4``: the LZ4 frame format, independent blocks of at most 64 KiB; any LZ4 frame is read.
- 4 ``zstd``: a zstd frame (with its content size); frames with or without the content size are read.

Ids 5-7 name no codec: UNSUPPORTED_COMPRESSION_TYPE (76), as Kafka answers.

The codecs come from maintained libraries, the fastest measured here for each (docs/performance.md): gzip
from the standard library's zlib, snappy and lz4 from cramjam (Rust), zstd from zstandard (its streaming
decoder reads a frame without a content size, as the Java client writes them, about 40x faster than
cramjam's). Concatenated gzip members and zstd frames are read one after another, as Java's streams do.
A stream that does not decompress raises :class:`CompressionError`; the leader answers CORRUPT_MESSAGE (2)
for it.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import zstandard

from protocol.errors import Errors, KafkaError

Buffer = bytes | bytearray | memoryview


class CompressionType(enum.IntEnum):
    """Kafka's ``CompressionType``: the id in a batch's attributes; ``config_name`` is Kafka's name."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def config_name(self) -> str:
        """The name in ``compression.type`` and on the command line (``none``, ``gzip`` ...)."""
        return self.name.lower()

    @classmethod
    def for_name(cls, name: str) -> CompressionType:
        """The codec named ``name`` (Kafka's names; ``uncompressed`` is ``none``, as in the topic config)."""
        key = name.strip().lower()
        if key == "uncompressed":
            key = "none"
        for codec in cls:
            if codec.config_name == key:
                return codec
        raise ValueError(f"unknown compression type {name!r} (none, gzip, snappy, lz4, zstd)")


CODEC_NAMES = tuple(c.config_name for c in CompressionType)


class CompressionError(ValueError):
    """The bytes do not decompress with the batch's codec."""


def unsupported_codec(codec_id: int) -> KafkaError:
    return KafkaError(
        Errors.UNSUPPORTED_COMPRESSION_TYPE,
        f"compression codec id {codec_id} in the batch attributes names no codec (0-4: none, gzip, snappy, "
        "lz4, zstd)",
    )


# --- snappy, as the Java client frames it (xerial snappy-java)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_I32 = struct.Struct(">i")


def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    out = bytearray(_XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += _I32.pack(len(block))
        out += memoryview(block)
    return bytes(out)


def _snappy_decompress(data: Buffer) -> bytes:
    view = memoryview(data)
    if len(view) < len(_XERIAL_HEADER) or view[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))  # one raw block, as Kafka's reader accepts
    out = bytearray()
    pos = len(_XERIAL_HEADER)
    while pos < len(view):
        if pos + 4 > len(view):
            raise CompressionError(f"xerial snappy stream: a block length cut off at byte {pos}")
        (n,) = _I32.unpack_from(view, pos)
        pos += 4
        if n < 0 or pos + n > len(view):
            raise CompressionError(
                f"xerial snappy stream: block of {n} bytes at byte {pos} runs past the end"
            )
        out += memoryview(cramjam.snappy.decompress_raw(view[pos : pos + n]))
        pos += n
    return bytes(out)


def _lz4_compress(data: Buffer) -> bytes:
    compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _gzip_compress(data: Buffer) -> bytes:
    compressor = zlib.compressobj(wbits=31)  # 16 + 15: a gzip header and trailer
    return compressor.compress(data) + compressor.flush()


# The most a batch's records may decompress to. Kafka decompresses record by record as it validates; isrsim
# decompresses a batch whole, so a small stream that expands without end (gzip and zstd can reach a
# thousand times and more) is refused instead of exhausting the broker's memory.
MAX_DECOMPRESSED_BYTES = 256 * 1024 * 1024


def _too_large(name: str) -> CompressionError:
    return CompressionError(
        f"the {name} stream decompresses to more than {MAX_DECOMPRESSED_BYTES} bytes (isrsim's limit)"
    )


def _gzip_decompress(data: Buffer) -> bytes:
    out = []
    rest = bytes(data)
    room = MAX_DECOMPRESSED_BYTES
    while rest:
        d = zlib.decompressobj(wbits=31)
        chunk = d.decompress(rest, room + 1)
        room -= len(chunk)
        if room < 0:
            raise _too_large("gzip")
        out.append(chunk)
        if not d.eof:
            raise CompressionError("the gzip stream ends before its trailer")
        rest = d.unused_data
    return b"".join(out)


_ZSTD = zstandard.ZstdDecompressor()


# zstd input is fed this much at a time, so the output of one step stays bounded (a zstd block of a few
# bytes may stand for 128 KiB) and the limit is checked before much more is made.
_ZSTD_STEP = 1024


def _zstd_decompress(data: Buffer) -> bytes:
    out = []
    total = 0
    rest = bytes(data)
    while rest:
        d = _ZSTD.decompressobj()
        pos = 0
        while not d.eof and pos < len(rest):
            chunk = d.decompress(rest[pos : pos + _ZSTD_STEP])
            pos += _ZSTD_STEP
            total += len(chunk)
            if total > MAX_DECOMPRESSED_BYTES:
                raise _too_large("zstd")
            out.append(chunk)
        if not d.eof:
            raise CompressionError("the zstd stream ends inside a frame")
        rest = d.unused_data + rest[pos:]
    return b"".join(out)


def compress(codec: CompressionType, data: Buffer) -> bytes:
    """``data`` (the records of a batch) compressed with ``codec`` in Kafka's framing."""
    if codec == CompressionType.NONE:
        return bytes(data)
    if codec == CompressionType.GZIP:
        return _gzip_compress(data)
    if codec == CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec == CompressionType.LZ4:
        return _lz4_compress(data)
    if codec == CompressionType.ZSTD:
        return bytes(zstandard.ZstdCompressor().compress(data))
    raise unsupported_codec(int(codec))


def decompress(codec_id: int, data: Buffer) -> bytes:
    """The records of a batch whose attributes name ``codec_id``. Raises :class:`KafkaError`
    UNSUPPORTED_COMPRESSION_TYPE for ids 5-7 and :class:`CompressionError` for bytes that do not
    decompress."""
    try:
        if codec_id == CompressionType.NONE:
            return bytes(data)
        if codec_id == CompressionType.GZIP:
            return _gzip_decompress(data)
        if codec_id == CompressionType.SNAPPY:
            return _snappy_decompress(data)
        if codec_id == CompressionType.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec_id == CompressionType.ZSTD:
            return _zstd_decompress(data)
    except CompressionError:
        raise
    except Exception as exc:  # zlib.error, cramjam's DecompressionError, zstandard.ZstdError ...
        name = CompressionType(codec_id).config_name
        raise CompressionError(f"the {name} stream does not decompress ({exc})") from exc
    raise unsupported_codec(codec_id)


__all__ = [
    "CODEC_NAMES",
    "CompressionError",
    "CompressionType",
    "compress",
    "decompress",
    "unsupported_codec",
]
