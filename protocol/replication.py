"""What the replica manager (``broker``) and the replica fetchers (``fetcher``) hand each other: where a
follower starts fetching, what a fetcher reports of a partition, and what a follower append returned.

Both packages import these from here, so neither needs the other's modules for its types.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from protocol.common import BrokerEndpoint

TRUNCATION_MODE_KEY = "replication.truncation.mode"


class TruncationMode(StrEnum):
    """How a follower finds where its log stops agreeing with the leader's (broker config
    ``replication.truncation.mode``; docs/truncation-modes.md). The broker side (the initial fetch offset,
    truncation on becoming a follower, the leader's OFFSET_FOR_LEADER_EPOCH answer) and the fetcher's
    truncation decision both follow it."""

    # Kafka today: KIP-101 leader epochs with KIP-279's epoch in the answer (Kafka 2.0 and later).
    LEADER_EPOCH = "leader-epoch"
    # KIP-101 as first shipped (Kafka 0.11 - 1.1): one OFFSET_FOR_LEADER_EPOCH, whose answer has no epoch.
    LEADER_EPOCH_PRE_KIP_279 = "leader-epoch-pre-kip-279"
    # Before KIP-101 (Kafka <= 0.10.2): a new follower truncates to its own high watermark.
    HIGH_WATERMARK = "high-watermark"

    @classmethod
    def parse(cls, raw: str) -> TruncationMode:
        """The mode named ``raw``; a ValueError naming the allowed values otherwise."""
        try:
            return cls(raw.strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown truncation mode {raw.strip()!r}; allowed: {allowed}") from None


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
