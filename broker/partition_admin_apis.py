"""Partition admin APIs a broker answers (docs/clients.md): ELECT_LEADERS (43), forwarded to the active
controller, which elects (KIP-590; ``controller/leader_election.py``), and DESCRIBE_LOG_DIRS (35), answered
by the broker asked, of its own log dir (Kafka's ``ReplicaManager.describeLogDirs``): each hosted partition's
size on disk, its offset lag (how far its log end is below its high watermark, 0 when it is not; -1 for a
log whose partition is not hosted) and ``is_future_key`` false (isrsim moves no replica between
directories); total and usable bytes of the directory's file system. Both need the principal to have Alter
(43) or Describe (35) on the cluster first."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from broker.admin_apis import AdminApis
from broker.replica_manager import ReplicaManager
from protocol import admin_messages as am
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.schema import to_body
from server.request_channel import Request, error_body

# Kafka's DescribeLogDirsResponse.INVALID_OFFSET_LAG.
INVALID_OFFSET_LAG = -1


def handle_elect_leaders(admin: AdminApis, request: Request, req: am.ElectLeadersRequest) -> None:
    def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
        request.complete(answer if answer is not None else error_body(error, why))

    admin._forward(request, ApiKeys.ELECT_LEADERS, req, req.timeout_ms, respond)


def handle_alter_partition_reassignments(
    admin: AdminApis, request: Request, req: am.AlterPartitionReassignmentsRequest
) -> None:
    def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
        request.complete(answer if answer is not None else error_body(error, why))

    admin._forward(request, ApiKeys.ALTER_PARTITION_REASSIGNMENTS, req, req.timeout_ms, respond)


def handle_list_partition_reassignments(
    admin: AdminApis, request: Request, req: am.ListPartitionReassignmentsRequest
) -> None:
    def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
        request.complete(answer if answer is not None else error_body(error, why))

    admin._forward(request, ApiKeys.LIST_PARTITION_REASSIGNMENTS, req, req.timeout_ms, respond)


class LogDirsApis:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    def handlers(self) -> dict[int, Callable[[Request, Any], None]]:
        return {ApiKeys.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs}

    def handle_describe_log_dirs(self, request: Request, req: am.DescribeLogDirsRequest) -> None:
        request.complete(to_body(describe_log_dirs(self.replica_manager, req)))


def describe_log_dirs(rm: ReplicaManager, req: am.DescribeLogDirsRequest) -> am.DescribeLogDirsResponse:
    manager = rm.log_manager
    log_dir = str(manager.log_dir.resolve())
    if manager.offline:
        return am.DescribeLogDirsResponse(
            results=[am.DescribeLogDirsResult(error_code=int(Errors.KAFKA_STORAGE_ERROR), log_dir=log_dir)]
        )
    wanted: set[tuple[str, int]] | None = None
    if req.topics is not None:
        wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
    topics: dict[str, am.DescribeLogDirsTopic] = {}
    for tp, lg in sorted(manager.logs.items()):
        if wanted is not None and tp not in wanted:
            continue
        partition = rm.partitions.get(tp)
        lag = (
            INVALID_OFFSET_LAG if partition is None else max(partition.high_watermark - lg.log_end_offset, 0)
        )
        topics.setdefault(tp[0], am.DescribeLogDirsTopic(name=tp[0])).partitions.append(
            am.DescribeLogDirsPartition(
                partition_index=tp[1], partition_size=lg.size_in_bytes, offset_lag=lag, is_future_key=False
            )
        )
    try:
        usage = shutil.disk_usage(manager.log_dir)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    return am.DescribeLogDirsResponse(
        results=[
            am.DescribeLogDirsResult(
                log_dir=log_dir, topics=list(topics.values()), total_bytes=total, usable_bytes=usable
            )
        ]
    )
