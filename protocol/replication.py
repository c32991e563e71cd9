"""What the replica manager (``broker``) and the replica fetchers (``fetcher``) hand each other: where a
follower starts fetching, what a fetcher reports of a partition, and what a follower append returned.

Both packages import these from here, so neither needs the other's modules for its types.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.common import BrokerEndpoint


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """Where a follower starts fetching a partition (Kafka's ``InitialFetchState``): the leader to fetch from,
    the leader epoch it was told of, and the offset to start from."""

    leader: BrokerEndpoint
    current_leader_epoch: int
    init_offset: int


@dataclass(frozen=True, slots=True)
class FetchStateView:
    """What DESCRIBE_REPLICA_STATE reports of a follower partition's fetcher."""

    state: str  # "truncating", "fetching", "delayed", "failed"
    fetch_offset: int
    lag: int | None
    leader_id: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What appending a batch run to a log returned (Kafka's ``LogAppendInfo``, the parts used here)."""

    first_offset: int
    last_offset: int
    num_records: int
    valid_bytes: int
