"""How the fuzzer cuts its stream into pipelined batches (tests/fuzz/runner.py), with no cluster."""

from __future__ import annotations

import struct

from protocol import ApiKeys, kafka_codec
from tests.fuzz.mutate import Input, inputs, load_corpus
from tests.fuzz.runner import _Feed, _numbered, _sentinel


def test_a_batch_ends_after_its_first_terminal_input_and_given_back_inputs_come_first() -> None:
    items = [Input(b"a", "seed"), Input(b"b", "bit_flip"), Input(b"c", "short_prefix"), Input(b"d", "seed")]
    feed = _Feed(iter(items), len(items))
    first = feed.batch(32)
    assert [i.data for i in first] == [b"a", b"b", b"c"] and first[-1].terminal
    feed.give_back(first[1:])
    assert [i.data for i in feed.batch(32)] == [b"b", b"c"]
    assert [i.data for i in feed.batch(32)] == [b"d"]
    assert feed.batch(32) == []


def test_numbering_sets_the_correlation_id_of_honest_frames_only() -> None:
    frame = kafka_codec.encode_request(ApiKeys.METADATA, 9, 5, "c", {"topics": None})
    numbered = _numbered(Input(frame, "seed"), 77)
    assert kafka_codec.decode_request(numbered[4:], {}).header.correlation_id == 77
    assert numbered[12:] == frame[12:]
    assert _numbered(Input(frame, "wrong_version"), 77) == frame  # terminal: as it is
    sentinel = _sentinel(9)
    (size,) = struct.unpack_from(">I", sentinel)
    assert size == len(sentinel) - 4
    assert kafka_codec.decode_request(sentinel[4:], {}).header.api_key == ApiKeys.API_VERSIONS


def test_heavy_requests_are_a_small_share_of_the_stream() -> None:
    stream = inputs(33, load_corpus(), pool_size=120)
    sample = [next(stream) for _ in range(20_000)]
    heavy = sum(1 for i in sample if i.heavy)
    assert 0 < heavy < len(sample) * 0.02, heavy
    terminal = sum(1 for i in sample if i.terminal)
    assert len(sample) * 0.15 < terminal < len(sample) * 0.45, terminal
