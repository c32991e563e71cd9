"""Clients that vanish mid-request never take a broker down."""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from protocol.api_keys import ApiKeys
from protocol.framing import encode_request
from protocol.records import build_simple_batch
from tests.integration.harness import BrokerProcess, fetch_body, request

pytestmark = pytest.mark.integration


def _produce(broker: BrokerProcess, n: int) -> dict:  # type: ignore[type-arg]
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": build_simple_batch([b"v"] * n)}]}
        ],
    }
    resp = trio.run(request, broker.host, broker.port, ApiKeys.PRODUCE, body)
    return resp["responses"][0]["partition_responses"][0]  # type: ignore[no-any-return]


def test_client_reset_while_its_long_poll_fetch_waits(single_broker: BrokerProcess) -> None:
    """A consumer parks a FETCH in the purgatory, then resets its connection (RST). New records wake the
    fetch, whose response is written to a dead socket: the broker must carry on serving."""
    leo = _produce(single_broker, 1)["base_offset"] + 1
    for _ in range(5):
        sock = socket.create_connection((single_broker.host, single_broker.port))
        body = fetch_body("t", 0, leo, replica_id=-1, max_wait_ms=5000, min_bytes=1)
        sock.sendall(encode_request(ApiKeys.FETCH, 0, 1, "vanishing", body))
        # Make sure the request arrived and is parked, then abort: SO_LINGER 0 sends a reset on close.
        resp = trio.run(request, single_broker.host, single_broker.port, ApiKeys.API_VERSIONS, {})
        assert resp["error_code"] == 0
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        result = _produce(single_broker, 3)
        assert result["error_code"] == 0
        leo = result["base_offset"] + 3
    assert single_broker.is_running()
    resp = trio.run(
        request, single_broker.host, single_broker.port, ApiKeys.FETCH, fetch_body("t", 0, 0, replica_id=-1)
    )
    assert resp["responses"][0]["partitions"][0]["high_watermark"] == leo
