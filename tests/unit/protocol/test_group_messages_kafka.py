"""Every group and transaction API's request and response, filled in, through Kafka's encoding at every
version served."""

from __future__ import annotations

from typing import Any

import pytest

from protocol import group_messages as g
from protocol import kafka_codec as kc
from protocol import txn_coordinator_messages as tm
from protocol.api_specs import API_SPECS, SPECS
from protocol.framing import RequestHeader
from protocol.schema import from_body, to_body

# The group and transaction APIs: msgpack serves them at Kafka's versions.
GROUP_SPECS = [s for s in API_SPECS if s.versions != (0, 0)]

RESPONSES: dict[int, Any] = {
    10: g.FindCoordinatorResponse(
        error_code=15,
        error_message="why",
        node_id=1,
        host="h",
        port=9,
        coordinators=[g.FindCoordinatorResponseCoordinator(key="g", node_id=1, host="h", port=9)],
    ),
    11: g.JoinGroupResponse(
        generation_id=3,
        protocol_type="consumer",
        protocol_name="range",
        leader="m",
        member_id="m",
        members=[g.JoinGroupResponseMember(member_id="m", metadata=b"x")],
    ),
    14: g.SyncGroupResponse(protocol_type="consumer", protocol_name="range", assignment=b"a"),
    12: g.HeartbeatResponse(error_code=27),
    13: g.LeaveGroupResponse(members=[g.LeaveGroupResponseMember(member_id="m", error_code=25)]),
    8: g.OffsetCommitResponse(
        topics=[
            g.OffsetCommitResponseTopic(
                name="t", partitions=[g.OffsetCommitResponsePartition(partition_index=0)]
            )
        ]
    ),
    9: g.OffsetFetchResponse(
        topics=[
            g.OffsetFetchResponseTopic(
                name="t", partitions=[g.OffsetFetchResponsePartition(partition_index=0, committed_offset=5)]
            )
        ],
        groups=[
            g.OffsetFetchResponseGroup(
                group_id="g",
                topics=[
                    g.OffsetFetchResponseTopic(
                        name="t",
                        partitions=[g.OffsetFetchResponsePartition(partition_index=0, committed_offset=5)],
                    )
                ],
            )
        ],
    ),
    16: g.ListGroupsResponse(
        groups=[g.ListGroupsResponseGroup(group_id="g", protocol_type="consumer", group_state="Stable")]
    ),
    15: g.DescribeGroupsResponse(
        groups=[
            g.DescribeGroupsResponseGroup(
                group_id="g",
                group_state="Stable",
                protocol_type="consumer",
                protocol_data="range",
                members=[
                    g.DescribeGroupsResponseMember(
                        member_id="m", member_metadata=b"s", member_assignment=b"a"
                    )
                ],
            )
        ]
    ),
    42: g.DeleteGroupsResponse(
        results=[
            g.DeleteGroupsResponseResult(group_id="g"),
            g.DeleteGroupsResponseResult(group_id="h", error_code=68),
        ]
    ),
    24: tm.AddPartitionsToTxnResponse(
        results_by_transaction=[
            tm.AddPartitionsToTxnResult(
                transactional_id="x",
                topic_results=[
                    tm.AddPartitionsToTxnTopicResult(
                        name="t",
                        results_by_partition=[tm.AddPartitionsToTxnPartitionResult(partition_index=1)],
                    )
                ],
            )
        ],
        results_by_topic_v3_and_below=[
            tm.AddPartitionsToTxnTopicResult(
                name="t",
                results_by_partition=[
                    tm.AddPartitionsToTxnPartitionResult(partition_index=0, partition_error_code=48)
                ],
            )
        ],
    ),
    25: tm.AddOffsetsToTxnResponse(error_code=51),
    26: tm.EndTxnResponse(error_code=90),
    28: tm.TxnOffsetCommitResponse(
        topics=[
            tm.TxnOffsetCommitResponseTopic(
                name="t", partitions=[tm.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0)]
            )
        ]
    ),
    66: tm.ListTransactionsResponse(
        unknown_state_filters=["Nope"],
        transaction_states=[
            tm.ListTransactionsState(transactional_id="x", producer_id=7, transaction_state="Ongoing")
        ],
    ),
}


@pytest.mark.parametrize(
    ("api", "version"),
    [(int(s.key), v) for s in GROUP_SPECS for v in range(s.versions[0], s.versions[1] + 1)],
)
def test_responses_encode_and_requests_decode_at_every_version(api: int, version: int) -> None:
    header = RequestHeader(api_key=api, api_version=version, correlation_id=7, client_id="c")
    length, payload = kc.encode_response_parts(header, None, to_body(RESPONSES[api]))
    assert int.from_bytes(length, "big") == len(payload) > 4
    # The smallest request body is one the handlers take.
    assert from_body(SPECS[api].request, _minimal_request(api)) is not None


def _minimal_request(api: int) -> dict[str, Any]:
    return {
        10: {"key": "g"},
        11: {
            "group_id": "g",
            "session_timeout_ms": 10000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [],
        },
        14: {"group_id": "g", "generation_id": 1, "member_id": "m"},
        12: {"group_id": "g", "generation_id": 1, "member_id": "m"},
        13: {"group_id": "g", "member_id": "m"},
        8: {"group_id": "g", "topics": []},
        9: {"group_id": "g"},
        16: {},
        15: {"groups": ["g"]},
        42: {"groups_names": ["g"]},
        24: {},
        25: {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
        26: {"transactional_id": "x", "producer_id": 1, "producer_epoch": 0, "committed": True},
        28: {"transactional_id": "x", "group_id": "g", "producer_id": 1, "producer_epoch": 0},
        66: {},
    }[api]
