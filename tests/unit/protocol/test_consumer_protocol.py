"""Kafka's consumer embedded protocol: subscriptions, assignments and the range assignor."""

from __future__ import annotations

from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from protocol.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)


def test_subscription_and_assignment_round_trip_and_match_kafka_python() -> None:
    sub = encode_subscription(["a", "b"])
    assert decode_subscription(sub) == ["a", "b"]
    theirs = ConsumerProtocolSubscription.decode(sub, version=0)
    assert list(theirs.topics) == ["a", "b"]
    asg = encode_assignment({"a": [0, 2], "b": []})
    assert decode_assignment(asg) == {"a": [0, 2], "b": []}
    decoded = ConsumerProtocolAssignment.decode(asg, version=0)
    assert [(tp.topic, list(tp.partitions)) for tp in decoded.assigned_partitions] == [
        ("a", [0, 2]),
        ("b", []),
    ]


def test_bad_bytes_are_none_and_empty_assignment_is_empty() -> None:
    assert decode_subscription(b"\x00") is None
    assert decode_assignment(b"\x00\x00\x00\x00\x00\x05") is None
    assert decode_assignment(b"") == {}


def test_range_assignor_splits_contiguously_by_member_id() -> None:
    got = range_assign({"m2": ["t"], "m1": ["t", "u"], "m3": ["t"]}, {"t": 7, "u": 2})
    assert got == {"m1": {"t": [0, 1, 2], "u": [0, 1]}, "m2": {"t": [3, 4]}, "m3": {"t": [5, 6]}}
    assert range_assign({"m": ["missing"]}, {}) == {"m": {}}
