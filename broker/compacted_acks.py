"""What the acknowledgement journal says of a compacted topic's records: each record's offset, key (hex)
and the CRC-32C of its value (None for a tombstone). The report's ``compaction_kept_latest`` judges the
final logs against them: the cleaner removes the batches it acknowledged, so their headers alone cannot
say which key's latest value a log must still hold."""

from __future__ import annotations

from collections.abc import Sequence

from crc32c import crc32c

from protocol.errors import KafkaError
from protocol.records import BatchHeader, decode_records, iter_batches


def record_digests(
    records: bytes | bytearray | memoryview, appended: Sequence[BatchHeader]
) -> tuple[tuple[int, str, int | None], ...] | None:
    """``(offset, key hex, value CRC or None)`` per keyed record of the produced ``records``, at the
    offsets of the ``appended`` batches (the same batches in order, as the leader wrote them); None if
    they do not line up or do not decode."""
    out: list[tuple[int, str, int | None]] = []
    try:
        produced = list(iter_batches(records, validate=False))
        if len(produced) != len(appended):
            return None
        for (pos, _), header in zip(produced, appended, strict=True):
            for r in decode_records(records, pos)[1]:
                if r.key is None:
                    continue
                value = None if r.value is None else crc32c(r.value)
                out.append((header.base_offset + r.offset_delta, r.key.hex(), value))
    except (KafkaError, ValueError):
        return None
    return tuple(out)
