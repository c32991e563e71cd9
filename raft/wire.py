"""The quorum APIs' wire bodies (``protocol.raft_messages``) to and from what the Raft core handles
(``raft.messages``): the one partition ``__cluster_metadata-0`` unwrapped, and the core's
correlation id kept beside the wire's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocol import raft_messages as wm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors, InvalidRequestError
from protocol.schema import from_body, to_body
from raft import messages as rm


def _only_partition(topics: list[Any], what: str) -> Any:
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        raise InvalidRequestError(f"{what}: expected exactly one partition, {wm.METADATA_TOPIC}-0")
    topic = topics[0]
    name = getattr(topic, "topic_name", None) or getattr(topic, "topic", None)
    partition = topic.partitions[0]
    index = getattr(partition, "partition_index", getattr(partition, "partition", 0))
    if name != wm.METADATA_TOPIC or index != wm.METADATA_PARTITION:
        raise InvalidRequestError(f"{what}: unknown partition {name}-{index}")
    return partition


def request_to_wire(request: rm.RaftRequest, cluster_id: str) -> tuple[ApiKeys, dict[str, Any]]:
    body: Any
    if isinstance(request, rm.VoteRequest):
        key = ApiKeys.VOTE
        body = wm.VoteRequest(
            cluster_id=cluster_id,
            topics=[
                wm.VoteRequestTopic(
                    partitions=[
                        wm.VoteRequestPartition(
                            candidate_epoch=request.candidate_epoch,
                            candidate_id=request.candidate_id,
                            last_offset_epoch=request.last_offset_epoch,
                            last_offset=request.last_offset,
                        )
                    ]
                )
            ],
        )
    elif isinstance(request, rm.BeginQuorumEpochRequest):
        key = ApiKeys.BEGIN_QUORUM_EPOCH
        body = wm.BeginQuorumEpochRequest(
            cluster_id=cluster_id,
            topics=[
                wm.BeginQuorumEpochRequestTopic(
                    partitions=[
                        wm.BeginQuorumEpochRequestPartition(
                            leader_id=request.leader_id, leader_epoch=request.leader_epoch
                        )
                    ]
                )
            ],
        )
    elif isinstance(request, rm.EndQuorumEpochRequest):
        key = ApiKeys.END_QUORUM_EPOCH
        body = wm.EndQuorumEpochRequest(
            cluster_id=cluster_id,
            topics=[
                wm.EndQuorumEpochRequestTopic(
                    partitions=[
                        wm.EndQuorumEpochRequestPartition(
                            leader_id=request.leader_id,
                            leader_epoch=request.leader_epoch,
                            preferred_successors=list(request.preferred_successors),
                        )
                    ]
                )
            ],
        )
    else:
        key = ApiKeys.FETCH
        body = wm.RaftFetchRequest(
            cluster_id=cluster_id,
            replica_id=request.replica_id,
            max_wait_ms=request.max_wait_ms,
            topics=[
                wm.RaftFetchRequestTopic(
                    partitions=[
                        wm.RaftFetchRequestPartition(
                            current_leader_epoch=request.current_leader_epoch,
                            fetch_offset=request.fetch_offset,
                            last_fetched_epoch=request.last_fetched_epoch,
                        )
                    ]
                )
            ],
        )
    return key, to_body(body)


def request_from_wire(key: ApiKeys, body: dict[str, Any]) -> tuple[rm.RaftRequest, str | None, int]:
    """The core's request, the sender's cluster id, and the sender's id. Raises InvalidRequestError."""
    wire: Any = from_body(wm.RAFT_REQUEST_TYPES[key], body)
    if key == ApiKeys.VOTE:
        p = _only_partition(wire.topics, "VOTE")
        request: rm.RaftRequest = rm.VoteRequest(
            0, p.candidate_epoch, p.candidate_id, p.last_offset_epoch, p.last_offset
        )
        return request, wire.cluster_id, p.candidate_id
    if key == ApiKeys.BEGIN_QUORUM_EPOCH:
        p = _only_partition(wire.topics, "BEGIN_QUORUM_EPOCH")
        return rm.BeginQuorumEpochRequest(0, p.leader_id, p.leader_epoch), wire.cluster_id, p.leader_id
    if key == ApiKeys.END_QUORUM_EPOCH:
        p = _only_partition(wire.topics, "END_QUORUM_EPOCH")
        request = rm.EndQuorumEpochRequest(0, p.leader_id, p.leader_epoch, tuple(p.preferred_successors))
        return request, wire.cluster_id, p.leader_id
    p = _only_partition(wire.topics, "FETCH")
    request = rm.FetchRequest(
        0, wire.replica_id, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, wire.max_wait_ms
    )
    return request, wire.cluster_id, wire.replica_id


def response_to_wire(key: ApiKeys, response: rm.RaftResponse, error_code: int = 0) -> dict[str, Any]:
    body: Any
    if isinstance(response, rm.VoteResponse):
        body = wm.VoteResponse(
            error_code=error_code,
            topics=[
                wm.VoteResponseTopic(
                    partitions=[
                        wm.VoteResponsePartition(
                            error_code=response.error_code,
                            leader_id=response.leader_id,
                            leader_epoch=response.leader_epoch,
                            vote_granted=response.vote_granted,
                        )
                    ]
                )
            ],
        )
    elif isinstance(response, rm.QuorumEpochResponse):
        cls = wm.BeginQuorumEpochResponse if key == ApiKeys.BEGIN_QUORUM_EPOCH else wm.EndQuorumEpochResponse
        body = cls(
            error_code=error_code,
            topics=[
                wm.QuorumEpochResponseTopic(
                    partitions=[
                        wm.QuorumEpochResponsePartition(
                            error_code=response.error_code,
                            leader_id=response.leader_id,
                            leader_epoch=response.leader_epoch,
                        )
                    ]
                )
            ],
        )
    else:
        diverging = response.diverging_epoch
        body = wm.RaftFetchResponse(
            error_code=error_code,
            responses=[
                wm.RaftFetchResponseTopic(
                    partitions=[
                        wm.RaftFetchResponsePartition(
                            error_code=response.error_code,
                            high_watermark=response.high_watermark,
                            log_start_offset=response.log_start_offset,
                            diverging_epoch=None
                            if diverging is None
                            else wm.DivergingEpoch(epoch=diverging.epoch, end_offset=diverging.end_offset),
                            current_leader=wm.CurrentLeader(
                                leader_id=response.leader_id, leader_epoch=response.leader_epoch
                            ),
                            records=response.records,
                        )
                    ]
                )
            ],
        )
    return to_body(body)


def response_from_wire(key: ApiKeys, correlation_id: int, body: dict[str, Any]) -> rm.RaftResponse:
    """The core's response to its request ``correlation_id``. Raises InvalidRequestError."""
    wire: Any = from_body(wm.RAFT_RESPONSE_TYPES[key], body)
    if key == ApiKeys.VOTE:
        p = _only_partition(wire.topics, "VOTE response")
        return rm.VoteResponse(
            correlation_id, p.error_code or wire.error_code, p.leader_id, p.leader_epoch, p.vote_granted
        )
    if key in (ApiKeys.BEGIN_QUORUM_EPOCH, ApiKeys.END_QUORUM_EPOCH):
        p = _only_partition(wire.topics, f"{key.name} response")
        return rm.QuorumEpochResponse(
            correlation_id, p.error_code or wire.error_code, p.leader_id, p.leader_epoch
        )
    p = _only_partition(wire.responses, "FETCH response")
    diverging = (
        None
        if p.diverging_epoch is None
        else rm.DivergingEpoch(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
    )
    return rm.FetchResponse(
        correlation_id,
        p.error_code or wire.error_code,
        p.current_leader.leader_id,
        p.current_leader.leader_epoch,
        high_watermark=p.high_watermark,
        log_start_offset=p.log_start_offset,
        diverging_epoch=diverging,
        records=p.records,
    )


def error_response(key: ApiKeys, error_code: int, leader_id: int, epoch: int) -> dict[str, Any]:
    """A whole-request error (INCONSISTENT_CLUSTER_ID, CLUSTER_AUTHORIZATION_FAILED ...)."""
    response: rm.RaftResponse
    if key == ApiKeys.VOTE:
        response = rm.VoteResponse(0, error_code, leader_id, epoch, False)
    elif key == ApiKeys.FETCH:
        response = rm.FetchResponse(0, error_code, leader_id, epoch)
    else:
        response = rm.QuorumEpochResponse(0, error_code, leader_id, epoch)
    return response_to_wire(key, response, error_code)


def describe_quorum_to_wire(
    described: rm.DescribeQuorumResponse,
    voters: Mapping[int, tuple[str, int]] | None = None,
    listener_name: str = "CONTROLLER",
) -> dict[str, Any]:
    """The DESCRIBE_QUORUM answer; ``nodes`` lists every voter's address (DescribeQuorum v2's ``nodes``,
    on the listener the voters speak to each other on), on an error answer too, so a client can find the
    leader it names."""
    error_message = None
    if described.error_code == Errors.NOT_LEADER_OR_FOLLOWER:
        error_message = "this voter is not the quorum leader" + (
            f"; the leader is {described.leader_id}" if described.leader_id >= 0 else "; no leader is known"
        )
    return to_body(
        wm.DescribeQuorumResponse(
            topics=[
                wm.DescribeQuorumResponseTopic(
                    partitions=[
                        wm.DescribeQuorumResponsePartition(
                            error_code=described.error_code,
                            error_message=error_message,
                            leader_id=described.leader_id,
                            leader_epoch=described.leader_epoch,
                            high_watermark=described.high_watermark,
                            current_voters=[
                                wm.ReplicaStateDescription(
                                    replica_id=v.replica_id,
                                    log_end_offset=v.log_end_offset,
                                    last_fetch_timestamp=v.last_fetch_timestamp,
                                    last_caught_up_timestamp=v.last_caught_up_timestamp,
                                )
                                for v in described.current_voters
                            ],
                        )
                    ]
                )
            ],
            nodes=[
                wm.DescribeQuorumResponseNode(
                    node_id=node_id,
                    listeners=[wm.DescribeQuorumResponseListener(name=listener_name, host=host, port=port)],
                )
                for node_id, (host, port) in sorted((voters or {}).items())
            ],
        )
    )


__all__ = [
    "describe_quorum_to_wire",
    "error_response",
    "request_from_wire",
    "request_to_wire",
    "response_from_wire",
    "response_to_wire",
]
