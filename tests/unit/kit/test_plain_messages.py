"""Messages speak of the problem, not of Python (issue 27, item 9): a bad number in an --override, a lost
connection in a producer's retry line, the errors a workload met."""

from __future__ import annotations

from collections import Counter

import pytest

from kit.errors import ClusterError
from kit.local_cluster import check_overrides
from kit.producer import ProduceStats, connection_error
from protocol import ConnectionClosed


def test_a_bad_number_in_an_override_is_named_without_python() -> None:
    with pytest.raises(ClusterError) as raised:
        check_overrides(("replica.lag.time.max.ms=fast",))
    message = str(raised.value)
    assert "replica.lag.time.max.ms" in message and "'fast'" in message and "not a number" in message
    assert "invalid literal" not in message and "int()" not in message


def test_connection_errors_are_words() -> None:
    assert connection_error(ConnectionRefusedError(111, "Connection refused")) == "connection refused"
    assert connection_error(ConnectionClosed("peer closed")) == "connection lost"
    assert connection_error(OSError("reset")) == "connection lost"
    assert connection_error(TimeoutError()) == "connection timed out"


def test_the_errors_seen_read_as_a_list_not_a_dict() -> None:
    stats = ProduceStats(errors=Counter({"REQUEST_TIMED_OUT": 92, "NOT_ENOUGH_REPLICAS": 3}))
    assert stats.errors_seen() == "REQUEST_TIMED_OUT x92, NOT_ENOUGH_REPLICAS x3"
    assert stats.errors_seen(1) == "REQUEST_TIMED_OUT x92"
