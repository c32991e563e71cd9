"""The consumer-group APIs' handlers (Kafka's ``KafkaApis.handle*Group*`` / ``handleOffset*`` /
``handleFindCoordinatorRequest``): version differences, authorization, and the mapping between the
request and response bodies and the coordinator core's calls and results. ``KafkaApis`` dispatches to them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from broker.coordinator_lookup import coordinator_error, find_coordinator_node
from broker.metadata_cache import MetadataCache
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.coordinator_core import CommitResult, DeleteResult, JoinResult, LeaveResult, SyncResult
from coordinator.group.group_metadata import OffsetAndMetadata
from protocol import group_messages as g
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.errors import Errors
from protocol.schema import to_body
from server.auth_helper import AuthHelper
from server.client_activity import ClientActivity
from server.cooperative import Steps, chunks, pure
from server.request_channel import Request
from server.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

Handler = Callable[[Request, Any], Coroutine[Any, Any, None] | None]


def _client_host(request: Request) -> str:
    """Kafka's ``clientHost``: the peer's address with a leading slash."""
    peer = str(getattr(request.connection, "peer", "") or getattr(request.connection, "address", ""))
    host = peer.rsplit(":", 1)[0] if peer.count(":") == 1 else peer
    return "/" + host.strip("[]") if host else ""


class GroupApis:
    def __init__(
        self, coordinator: GroupCoordinator, auth: AuthHelper, metadata_cache: MetadataCache
    ) -> None:
        self.coordinator = coordinator
        self.core = coordinator.core
        self.auth = auth
        self.metadata_cache = metadata_cache
        # OffsetCommits in client-activity.jsonl (set by the server).
        self.client_activity: ClientActivity | None = None
        # FindCoordinator of a transactional id (key_type 1): the transaction coordinator's (set by the
        # server).
        self.find_transaction_coordinator: (
            Callable[[Request, str], g.FindCoordinatorResponseCoordinator] | None
        ) = None

    def handlers(self) -> dict[int, Handler]:
        return {
            ApiKeys.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKeys.JOIN_GROUP: self.handle_join_group,
            ApiKeys.SYNC_GROUP: self.handle_sync_group,
            ApiKeys.HEARTBEAT: self.handle_heartbeat,
            ApiKeys.LEAVE_GROUP: self.handle_leave_group,
            ApiKeys.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKeys.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKeys.LIST_GROUPS: self.handle_list_groups,
            ApiKeys.DESCRIBE_GROUPS: self.handle_describe_groups,
            ApiKeys.DELETE_GROUPS: self.handle_delete_groups,
        }

    def _group_allowed(self, request: Request, operation: AclOperation, group_id: str) -> bool:
        return self.auth.authorize(request, operation, ResourceType.GROUP, group_id)

    # ------------------------------------------------------------------ FindCoordinator

    async def handle_find_coordinator(self, request: Request, req: g.FindCoordinatorRequest) -> None:
        version = request.header.api_version
        keys = req.coordinator_keys if version >= 4 else [req.key]
        found: list[g.FindCoordinatorResponseCoordinator] = []
        async for some in chunks(keys):
            found += [self._find(request, key, req.key_type) for key in some]
        if version >= 4:
            answer = g.FindCoordinatorResponse(coordinators=found)
            request.complete(await pure(request.encode_later, to_body, answer))
            return
        one = found[0]
        request.complete(
            to_body(
                g.FindCoordinatorResponse(
                    error_code=one.error_code,
                    error_message=one.error_message,
                    node_id=one.node_id,
                    host=one.host,
                    port=one.port,
                )
            )
        )

    def _find(self, request: Request, key: str, key_type: int) -> g.FindCoordinatorResponseCoordinator:
        if key_type == g.COORDINATOR_TYPE_TRANSACTION:
            if self.find_transaction_coordinator is None:
                return coordinator_error(
                    key, Errors.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not running"
                )
            return self.find_transaction_coordinator(request, key)
        if key_type != g.COORDINATOR_TYPE_GROUP:  # Kafka's CoordinatorType.forId refuses it the same way
            return coordinator_error(key, Errors.INVALID_REQUEST, f"unknown coordinator key_type {key_type}")
        if not self._group_allowed(request, AclOperation.DESCRIBE, key):
            return coordinator_error(
                key, Errors.GROUP_AUTHORIZATION_FAILED, f"not authorized to describe group {key!r}"
            )
        return find_coordinator_node(
            self.metadata_cache,
            request.listener_name,
            key,
            self.coordinator.offsets_topic_partition(key),
            self.coordinator.maybe_create_offsets_topic,
        )

    # ------------------------------------------------------------------ JoinGroup / SyncGroup / Heartbeat

    def handle_join_group(self, request: Request, req: g.JoinGroupRequest) -> None:
        version = request.header.api_version

        def answer(result: JoinResult) -> None:
            protocol_name = result.protocol_name
            if protocol_name is None and version < 7:
                protocol_name = ""  # not nullable before v7 (Kafka's JoinGroupResponse does the same)
            request.complete(
                to_body(
                    g.JoinGroupResponse(
                        error_code=int(result.error),
                        generation_id=result.generation_id,
                        protocol_type=result.protocol_type,
                        protocol_name=protocol_name,
                        leader=result.leader_id,
                        member_id=result.member_id,
                        members=[
                            g.JoinGroupResponseMember(
                                member_id=m.member_id,
                                group_instance_id=m.group_instance_id,
                                metadata=m.metadata,
                            )
                            for m in result.members
                        ],
                    )
                )
            )

        if not self._group_allowed(request, AclOperation.READ, req.group_id):
            answer(JoinResult(req.member_id, Errors.GROUP_AUTHORIZATION_FAILED))
            return
        rebalance_timeout = req.rebalance_timeout_ms
        if version == 0 or rebalance_timeout < 0:
            rebalance_timeout = req.session_timeout_ms  # v0 has none: the session timeout (as Kafka)
        self.coordinator.apply(
            self.core.join_group(
                answer,
                req.group_id,
                req.member_id,
                group_instance_id=req.group_instance_id if version >= 5 else None,
                require_known_member_id=version >= 4,
                client_id=request.header.client_id or "",
                client_host=_client_host(request),
                rebalance_timeout_ms=rebalance_timeout,
                session_timeout_ms=req.session_timeout_ms,
                protocol_type=req.protocol_type,
                protocols=[(p.name, p.metadata) for p in req.protocols],
            )
        )

    def handle_sync_group(self, request: Request, req: g.SyncGroupRequest) -> None:
        def answer(result: SyncResult) -> None:
            request.complete(
                to_body(
                    g.SyncGroupResponse(
                        error_code=int(result.error),
                        protocol_type=result.protocol_type,
                        protocol_name=result.protocol_name,
                        assignment=result.assignment,
                    )
                )
            )

        if not self._group_allowed(request, AclOperation.READ, req.group_id):
            answer(SyncResult(Errors.GROUP_AUTHORIZATION_FAILED))
            return
        self.coordinator.apply(
            self.core.sync_group(
                answer,
                req.group_id,
                req.generation_id,
                req.member_id,
                protocol_type=req.protocol_type,
                protocol_name=req.protocol_name,
                group_instance_id=req.group_instance_id,
                assignments={a.member_id: a.assignment for a in req.assignments},
            )
        )

    def handle_heartbeat(self, request: Request, req: g.HeartbeatRequest) -> None:
        def answer(error: Errors) -> None:
            request.complete(to_body(g.HeartbeatResponse(error_code=int(error))))

        if not self._group_allowed(request, AclOperation.READ, req.group_id):
            answer(Errors.GROUP_AUTHORIZATION_FAILED)
            return
        self.coordinator.apply(
            self.core.heartbeat(
                answer,
                req.group_id,
                req.member_id,
                req.generation_id,
                group_instance_id=req.group_instance_id,
            )
        )

    def handle_leave_group(self, request: Request, req: g.LeaveGroupRequest) -> None:
        version = request.header.api_version
        leaving = (
            [(m.member_id, m.group_instance_id) for m in req.members]
            if version >= 3
            else [(req.member_id, None)]
        )

        def answer(result: LeaveResult) -> None:
            if version >= 3:
                request.complete(
                    to_body(
                        g.LeaveGroupResponse(
                            error_code=int(result.error),
                            members=[
                                g.LeaveGroupResponseMember(
                                    member_id=m.member_id,
                                    group_instance_id=m.group_instance_id,
                                    error_code=int(m.error),
                                )
                                for m in result.members
                            ],
                        )
                    )
                )
                return
            # v0-2 name one member: its error is the response's.
            error = result.error
            if error == Errors.NONE and result.members:
                error = result.members[0].error
            request.complete(to_body(g.LeaveGroupResponse(error_code=int(error))))

        if not self._group_allowed(request, AclOperation.READ, req.group_id):
            answer(LeaveResult(Errors.GROUP_AUTHORIZATION_FAILED))
            return
        self.coordinator.apply(self.core.leave_group(answer, req.group_id, leaving))

    # ------------------------------------------------------------------ OffsetCommit / OffsetFetch

    async def handle_offset_commit(self, request: Request, req: g.OffsetCommitRequest) -> None:
        steps = Steps()
        order = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
        early: dict[TopicPartition, Errors] = {}

        def record(errors: dict[TopicPartition, Errors]) -> None:
            if self.client_activity is not None:
                client_id, host = request.header.client_id or "", request.connection.address
                for tp in dict.fromkeys(order):
                    self.client_activity.record(
                        client_id, host, "offset_commit", tp[0], tp[1], error=int(errors.get(tp, Errors.NONE))
                    )

        def answer(result: CommitResult) -> None:
            errors = {**result.errors, **early}
            record(errors)
            request.complete(_offset_commit_body(order, errors))

        if not self._group_allowed(request, AclOperation.READ, req.group_id):
            answer(CommitResult(dict.fromkeys(order, Errors.GROUP_AUTHORIZATION_FAILED)))
            return
        readable = self.auth.authorized_topics(request, AclOperation.READ, (t.name for t in req.topics))
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in req.topics:
            for p in t.partitions:
                await steps.tick()
                tp = (t.name, p.partition_index)
                if t.name not in readable:
                    early[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
                elif not self.metadata_cache.contains(tp):
                    early[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    offsets[tp] = OffsetAndMetadata(
                        offset=p.committed_offset,
                        leader_epoch=p.committed_leader_epoch,
                        metadata=p.committed_metadata or "",
                    )
        if not offsets:
            # Nothing to write (every partition refused): answered here, its body built off the loop when
            # the request is large.
            if self.client_activity is not None:
                client_id, host = request.header.client_id or "", request.connection.address
                for tp in dict.fromkeys(order):
                    await steps.tick()
                    error = int(early.get(tp, Errors.NONE))
                    self.client_activity.record(client_id, host, "offset_commit", tp[0], tp[1], error=error)
            request.complete(await pure(request.encode_later, _offset_commit_body, order, early))
            return
        self.coordinator.apply(
            self.core.commit_offsets(
                answer,
                req.group_id,
                req.member_id,
                req.generation_id_or_member_epoch,
                offsets,
                group_instance_id=req.group_instance_id,
            )
        )

    def handle_offset_fetch(self, request: Request, req: g.OffsetFetchRequest) -> None:
        version = request.header.api_version
        if version >= 8:
            groups = [
                self._fetch_group(
                    request, grp.group_id, grp.topics, per_partition_errors=False, stable=req.require_stable
                )
                for grp in req.groups
            ]
            request.complete(to_body(g.OffsetFetchResponse(groups=groups)))
            return
        one = self._fetch_group(
            request, req.group_id, req.topics, per_partition_errors=version < 2, stable=req.require_stable
        )
        request.complete(
            to_body(
                g.OffsetFetchResponse(topics=one.topics, error_code=one.error_code if version >= 2 else 0)
            )
        )

    def _fetch_group(
        self,
        request: Request,
        group_id: str,
        topics: list[g.OffsetFetchRequestTopic] | None,
        *,
        per_partition_errors: bool,
        stable: bool = False,
    ) -> g.OffsetFetchResponseGroup:
        wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]

        def failed(error: Errors) -> g.OffsetFetchResponseGroup:
            out = g.OffsetFetchResponseGroup(group_id=group_id, error_code=int(error))
            if per_partition_errors and wanted:
                out.topics = _fetch_topics({tp: (None, error) for tp in wanted})
            return out

        if not self._group_allowed(request, AclOperation.DESCRIBE, group_id):
            return failed(Errors.GROUP_AUTHORIZATION_FAILED)
        error, offsets = self.core.fetch_offsets(group_id, wanted)
        if error != Errors.NONE:
            return failed(error)
        describable = self.auth.authorized_topics(request, AclOperation.DESCRIBE, {tp[0] for tp in offsets})
        results: dict[TopicPartition, tuple[OffsetAndMetadata | None, Errors]] = {}
        # require_stable (v7+, KIP-447): a partition whose offset a transaction may still change is unstable.
        unstable = self.core.unstable_offsets(group_id) if stable else set()
        for tp, committed in offsets.items():
            if tp in unstable and tp[0] in describable:
                results[tp] = (None, Errors.UNSTABLE_OFFSET_COMMIT)
            elif tp[0] in describable:
                results[tp] = (committed, Errors.NONE)
            elif wanted is not None:
                results[tp] = (None, Errors.TOPIC_AUTHORIZATION_FAILED)
        return g.OffsetFetchResponseGroup(group_id=group_id, topics=_fetch_topics(results))

    # ------------------------------------------------------------------ ListGroups / DescribeGroups

    def handle_list_groups(self, request: Request, req: g.ListGroupsRequest) -> None:
        error, overviews = self.core.list_groups(set(req.states_filter))
        all_allowed = self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.CLUSTER)
        groups = [
            g.ListGroupsResponseGroup(group_id=o.group_id, protocol_type=o.protocol_type, group_state=o.state)
            for o in overviews
            if all_allowed or self._group_allowed(request, AclOperation.DESCRIBE, o.group_id)
        ]
        request.complete(to_body(g.ListGroupsResponse(error_code=int(error), groups=groups)))

    async def handle_describe_groups(self, request: Request, req: g.DescribeGroupsRequest) -> None:
        out: list[g.DescribeGroupsResponseGroup] = []
        steps = Steps()
        for group_id in req.groups:
            await steps.tick()
            if not self._group_allowed(request, AclOperation.DESCRIBE, group_id):
                out.append(
                    g.DescribeGroupsResponseGroup(
                        group_id=group_id, error_code=int(Errors.GROUP_AUTHORIZATION_FAILED)
                    )
                )
                continue
            error, summary = self.core.describe_group(group_id)
            out.append(
                g.DescribeGroupsResponseGroup(
                    error_code=int(error),
                    group_id=group_id,
                    group_state=summary.state,
                    protocol_type=summary.protocol_type,
                    protocol_data=summary.protocol,
                    members=[
                        g.DescribeGroupsResponseMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in summary.members
                    ],
                )
            )
        body = await pure(request.encode_later, to_body, g.DescribeGroupsResponse(groups=out))
        if req.include_authorized_operations:  # Kafka's v3+: for each group the principal may Describe
            for group in body["groups"]:
                await steps.tick()
                if group["error_code"] != int(Errors.GROUP_AUTHORIZATION_FAILED):
                    group["authorized_operations"] = self.auth.authorized_operations(
                        request, ResourceType.GROUP, group["group_id"]
                    )
        request.complete(body)

    # ------------------------------------------------------------------ DeleteGroups

    def handle_delete_groups(self, request: Request, req: g.DeleteGroupsRequest) -> None:
        """Kafka's ``handleDeleteGroupsRequest``: Delete on each group (GROUP_AUTHORIZATION_FAILED
        otherwise), then the coordinator deletes the Empty ones."""
        order = list(dict.fromkeys(req.groups_names))
        refused = {
            group_id: Errors.GROUP_AUTHORIZATION_FAILED
            for group_id in order
            if not self._group_allowed(request, AclOperation.DELETE, group_id)
        }

        def answer(result: DeleteResult) -> None:
            errors = {**result.errors, **refused}
            results = [
                g.DeleteGroupsResponseResult(group_id=group_id, error_code=int(errors[group_id]))
                for group_id in order
            ]
            request.complete(to_body(g.DeleteGroupsResponse(results=results)))

        allowed = [group_id for group_id in order if group_id not in refused]
        if not allowed:
            answer(DeleteResult({}))
            return
        self.coordinator.apply(self.core.delete_groups(answer, allowed))


def _fetch_topics(
    results: dict[TopicPartition, tuple[OffsetAndMetadata | None, Errors]],
) -> list[g.OffsetFetchResponseTopic]:
    topics: dict[str, g.OffsetFetchResponseTopic] = {}
    for tp, (committed, error) in results.items():
        topic = topics.setdefault(tp[0], g.OffsetFetchResponseTopic(name=tp[0]))
        topic.partitions.append(
            g.OffsetFetchResponsePartition(
                partition_index=tp[1],
                committed_offset=-1 if committed is None else committed.offset,
                committed_leader_epoch=-1 if committed is None else committed.leader_epoch,
                metadata="" if committed is None else committed.metadata,
                error_code=int(error),
            )
        )
    return list(topics.values())


def _offset_commit_body(order: list[TopicPartition], errors: dict[TopicPartition, Errors]) -> dict[str, Any]:
    """OffsetCommit's answer: each partition once, in the request's order, with its error."""
    topics: dict[str, g.OffsetCommitResponseTopic] = {}
    for tp in dict.fromkeys(order):
        topic = topics.setdefault(tp[0], g.OffsetCommitResponseTopic(name=tp[0]))
        error = int(errors.get(tp, Errors.NONE))
        topic.partitions.append(g.OffsetCommitResponsePartition(partition_index=tp[1], error_code=error))
    return to_body(g.OffsetCommitResponse(topics=list(topics.values())))
