"""A follower partition as the replica fetchers see it (``fetcher.interface.FollowerPartition``): the broker
side of the fetcher's truncations, appends and HW updates. Each change goes to the replica state listener,
which journals it."""

from __future__ import annotations

import logging

from broker.partition import Partition
from broker.replica_state_listener import ReplicaStateListener
from protocol.replication import AppendResult

log = logging.getLogger(__name__)


class FollowerPartitionView:
    def __init__(self, partition: Partition, listener: ReplicaStateListener) -> None:
        self._p = partition
        self._listener = listener

    @property
    def log_end_offset(self) -> int:
        return self._p.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._p.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._p.high_watermark

    @property
    def leader_epoch(self) -> int:
        return self._p.leader_epoch

    def latest_epoch(self) -> int | None:
        return self._p.log.leader_epoch_cache.latest_epoch()

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._p.log.leader_epoch_cache.end_offset_for(epoch, self._p.log_end_offset)

    def truncate_to(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_to(offset)
        self._truncated(before_leo, before_hw, offset, reason)

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_fully_and_start_at(offset)
        self._truncated(before_leo, before_hw, offset, reason)

    def _truncated(self, before_leo: int, before_hw: int, offset: int, reason: str) -> None:
        p = self._p
        self._listener.on_truncated(
            p, offset, reason, log_end_offset_before=before_leo, high_watermark_before=before_hw
        )
        if offset < before_hw:
            log.warning(
                "broker %d: truncating %s to %d below its high watermark %d (%s)",
                p.local_broker_id,
                p.describe(),
                offset,
                before_hw,
                reason,
            )

    def append_as_follower(self, records: bytes) -> AppendResult | None:
        info = self._p.append_records_to_follower(records)
        self._listener.on_offsets_changed(self._p)
        return AppendResult(info.first_offset, info.last_offset, info.num_records, info.valid_bytes)

    def update_high_watermark(self, leader_hw: int) -> int:
        hw = self._p.update_follower_high_watermark(leader_hw)
        self._listener.on_offsets_changed(self._p)
        return hw

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self._p.log_start_offset < leader_log_start_offset <= self._p.high_watermark:
            self._p.maybe_increment_log_start_offset(leader_log_start_offset)
            self._listener.on_offsets_changed(self._p)
