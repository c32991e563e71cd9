"""Kafka's RequestMetrics: what ``RequestMetrics.instrument`` records around a handler."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from protocol.api_keys import ApiKeys
from server.metrics.request_metrics import RequestMetrics, request_name
from server.metrics.window import RESERVOIR_SIZE, LatencyWindow
from server.request_channel import Request
from tests.unit.broker.broker_support import fetch_request, make_request

KEYS = (ApiKeys.PRODUCE, ApiKeys.FETCH, ApiKeys.OFFSET_FOR_LEADER_EPOCH)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"no sample {name}{labels}"
    return value


def test_request_names_are_kafkas() -> None:
    assert request_name(ApiKeys.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert request_name(ApiKeys.LEADER_AND_ISR) == "LeaderAndIsr"
    assert request_name(ApiKeys.API_VERSIONS) == "ApiVersions"
    assert request_name(ApiKeys.LIST_OFFSETS) == "ListOffsets"


async def test_a_request_answered_by_its_handler_has_no_remote_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    registry = CollectorRegistry()
    metrics = RequestMetrics(KEYS, registry)

    async def handler(request: Request) -> None:
        await trio.sleep(0.002)
        request.complete({})

    request = make_request(ApiKeys.OFFSET_FOR_LEADER_EPOCH, {})
    request.received_at = trio.current_time() - 0.005  # 5 ms in the request channel
    await metrics.instrument(handler)(request)
    api = metrics.get("OffsetForLeaderEpoch")
    assert api is not None and api.requests == 1
    assert api.queue.total == pytest.approx(5.0)
    assert api.local.total == pytest.approx(2.0)
    assert api.remote.total == 0.0
    assert api.total.total == pytest.approx(7.0)
    name = "kafka_network_requestmetrics_"
    assert sample(registry, name + "requestspersec_total", request="OffsetForLeaderEpoch") == 1
    assert sample(registry, name + "totaltimems_count", request="OffsetForLeaderEpoch") == 1
    assert sample(registry, name + "totaltimems", request="OffsetForLeaderEpoch", quantile="0.99") == (
        pytest.approx(7.0)
    )
    assert sample(registry, name + "requestspersec_total", request="Produce") == 0


async def test_a_parked_request_counts_its_wait_as_remote_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    metrics = RequestMetrics(KEYS)
    parked: list[Request] = []

    async def handler(request: Request) -> None:
        parked.append(request)  # as a DelayedProduce would

    request = make_request(ApiKeys.PRODUCE, {})
    request.received_at = trio.current_time()
    await metrics.instrument(handler)(request)
    api = metrics.get("Produce")
    assert api is not None and api.requests == 0  # not answered yet
    await trio.sleep(0.2)
    parked[0].complete({})
    assert api.requests == 1
    assert api.local.total == 0.0
    assert api.remote.total == pytest.approx(200.0)
    assert api.total.total == pytest.approx(200.0)


async def test_fetches_are_also_counted_as_follower_or_consumer_fetches() -> None:
    registry = CollectorRegistry()
    metrics = RequestMetrics(KEYS, registry)

    async def handler(request: Request) -> None:
        request.complete({})

    metered = metrics.instrument(handler)
    await metered(make_request(ApiKeys.FETCH, fetch_request(2, 0)))
    await metered(make_request(ApiKeys.FETCH, fetch_request(-1, 0)))
    await metered(make_request(ApiKeys.FETCH, fetch_request(3, 0)))
    rate = "kafka_network_requestmetrics_requestspersec_total"
    assert sample(registry, rate, request="Fetch") == 3
    assert sample(registry, rate, request="FetchFollower") == 2
    assert sample(registry, rate, request="FetchConsumer") == 1
    text = generate_latest(registry).decode()
    assert "# TYPE kafka_network_requestmetrics_totaltimems summary" in text
    assert 'kafka_network_requestmetrics_totaltimems_count{request="Fetch"} 3.0' in text


async def test_an_api_not_metered_goes_straight_to_the_handler() -> None:
    metrics = RequestMetrics([ApiKeys.PRODUCE])
    seen: list[Request] = []

    async def handler(request: Request) -> None:
        seen.append(request)
        request.complete({})

    request = make_request(ApiKeys.METADATA, {"topics": None})
    await metrics.instrument(handler)(request)
    assert seen == [request] and request.on_complete is None


def test_latency_window_quantiles_cover_the_latest_samples() -> None:
    window = LatencyWindow()
    assert dict(window.quantiles())[0.99] == 0.0
    for v in range(1, 101):
        window.observe(float(v))
    q = dict(window.quantiles())
    assert (q[0.5], q[0.99], window.count, window.total) == (51.0, 100.0, 100, 5050.0)
    for _ in range(RESERVOIR_SIZE):
        window.observe(1000.0)  # the first hundred samples are pushed out
    assert dict(window.quantiles())[0.5] == 1000.0 and window.count == 100 + RESERVOIR_SIZE
