"""A fetch session carries a fetcher's ``last_fetched_epoch`` from round to round (Kafka's CachedPartition
keeps it), and a partition whose answer is a diverging epoch is always in an incremental response, even
with nothing else changed (Kafka's ``FetchResponse.isDivergingEpoch``)."""

from __future__ import annotations

from broker.fetch_session import CachedPartition, PartitionResponseData
from protocol.fetch_request import FetchRequestPartitionData


def test_cached_partition_keeps_the_last_fetched_epoch() -> None:
    req = FetchRequestPartitionData(fetch_offset=7, log_start_offset=0, max_bytes=100, current_leader_epoch=5,
                                    last_fetched_epoch=4)  # fmt: skip
    cached = CachedPartition.from_request(("t", 0), req)
    assert cached.last_fetched_epoch == 4
    assert cached.req_data == req
    cached.update_request_params(FetchRequestPartitionData(8, 0, 100, 5, 5))
    assert cached.req_data.last_fetched_epoch == 5
    # the default, what a consumer sends: none
    assert (
        CachedPartition.from_request(("t", 0), FetchRequestPartitionData(0, 0, 100)).last_fetched_epoch == -1
    )


def test_a_diverging_epoch_is_always_sent() -> None:
    cached = CachedPartition.from_request(
        ("t", 0), FetchRequestPartitionData(7, 0, 100, 5, 4), PartitionResponseData(0, 8, 8, 0)
    )
    same = PartitionResponseData(0, 8, 8, 0)
    assert not cached.maybe_update_response_data(same, True)
    diverging = PartitionResponseData(0, 8, 8, 0, b"", (3, 5))
    assert cached.maybe_update_response_data(diverging, True)
