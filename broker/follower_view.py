"""A follower partition as the replica fetchers see it (``fetcher.interface.FollowerPartition``): the
broker side of the fetcher's truncations, appends and HW updates, which it journals."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from broker.partition import Partition
from protocol.replication import AppendResult

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class FollowerPartitionView:
    """A follower partition as the replica fetcher sees it (``fetcher.interface.FollowerPartition``);
    journals truncations and offset changes."""

    def __init__(self, rm: ReplicaManager, partition: Partition) -> None:
        self._rm = rm
        self._p = partition

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

    def _journal_truncation(self, before_leo: int, before_hw: int, offset: int, reason: str) -> None:
        p = self._p
        self._rm.journal.emit_partition(
            "truncated",
            p.tp,
            truncate_to=offset,
            reason=reason,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            log_end_offset_before=before_leo,
            log_end_offset=p.log_end_offset,
            high_watermark_before=before_hw,
            high_watermark=p.high_watermark,
            latest_epoch=self.latest_epoch(),
        )
        if offset < before_hw:
            log.warning(
                "broker %d: truncating %s to %d below its high watermark %d (%s)",
                self._rm.broker_id,
                p.describe(),
                offset,
                before_hw,
                reason,
            )
        self._rm.observe_offsets(p)

    def truncate_to(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_to(offset)
        self._journal_truncation(before_leo, before_hw, offset, reason)

    def truncate_fully_and_start_at(self, offset: int, reason: str) -> None:
        before_leo, before_hw = self._p.log_end_offset, self._p.high_watermark
        self._p.truncate_fully_and_start_at(offset)
        self._journal_truncation(before_leo, before_hw, offset, reason)

    def append_as_follower(self, records: bytes) -> AppendResult | None:
        info = self._p.append_records_to_follower(records)
        self._rm.observe_offsets(self._p)
        return AppendResult(info.first_offset, info.last_offset, info.num_records, info.valid_bytes)

    def update_high_watermark(self, leader_hw: int) -> int:
        hw = self._p.update_follower_high_watermark(leader_hw)
        self._rm.observe_offsets(self._p)
        return hw

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        if self._p.log_start_offset < leader_log_start_offset <= self._p.high_watermark:
            self._p.maybe_increment_log_start_offset(leader_log_start_offset)
            self._rm.observe_offsets(self._p)
