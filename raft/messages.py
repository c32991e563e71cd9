"""What voters send each other, as the Raft core sees it: one partition's part of VOTE (52),
BEGIN_QUORUM_EPOCH (53), END_QUORUM_EPOCH (54), FETCH (1) and DESCRIBE_QUORUM (55).

The wire bodies (``topics[{topic_name, partitions[...]}]``, Kafka's JSON names in snake_case) wrap exactly
these fields for the one partition ``__cluster_metadata-0``; the shell converts. Every request carries a
``correlation_id`` the core chose, and its response the same one: a response to a request the core no
longer waits for is ignored, as Kafka's ``RequestManager`` ignores it.

``records`` is opaque to the core: what the leader's ``RaftLog.read`` returned and the follower's
``RaftLog.append_as_follower`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    correlation_id: int
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class VoteResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    correlation_id: int
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class QuorumEpochResponse:
    """The answer to BEGIN_QUORUM_EPOCH and END_QUORUM_EPOCH (their bodies are the same)."""

    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    correlation_id: int
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    correlation_id: int
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = 0
    diverging_epoch: DivergingEpoch | None = None
    records: bytes = b""


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: list[ReplicaDescription] = field(default_factory=list)


RaftRequest = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
RaftResponse = VoteResponse | QuorumEpochResponse | FetchResponse

__all__ = [
    "NO_LEADER",
    "BeginQuorumEpochRequest",
    "DescribeQuorumResponse",
    "DivergingEpoch",
    "EndQuorumEpochRequest",
    "FetchRequest",
    "FetchResponse",
    "QuorumEpochResponse",
    "RaftRequest",
    "RaftResponse",
    "ReplicaDescription",
    "VoteRequest",
    "VoteResponse",
]
