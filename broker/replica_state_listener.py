"""The one listener of a broker's replica state changes (docs/storage.md): the replica manager and the
follower view call it on every leadership change, epoch assignment, truncation, ISR change, offset change,
fetch error and stopped partition, and it writes the journal line. No other module writes a replica's state to
the journal (``KafkaServer`` writes only ``broker_started`` / ``broker_stopped``); the replica manager's
metrics (``broker.metrics.replica_metrics``) are updated here too, on the same calls.

``offsets`` lines are rate-limited: changes are collected as they happen and written by ``flush_offsets``,
which the broker calls every ``journal.offsets.interval.ms`` and at clean stop.
"""

from __future__ import annotations

from broker.metrics.replica_metrics import ReplicaManagerMetrics
from broker.partition import IsrChange, Partition
from protocol.common import TopicPartition, error_name
from server.journal import Journal, OffsetsJournal


class ReplicaStateListener:
    def __init__(self, journal: Journal, metrics: ReplicaManagerMetrics | None = None) -> None:
        self._journal = journal
        self._offsets = OffsetsJournal(journal)
        # The controller epoch of the request being applied (LEADER_AND_ISR, STOP_REPLICA): journaled with
        # the role changes it causes, so the report can tell that no older controller was obeyed.
        self.controller_epoch: int | None = None
        # Not in a registry unless the server gives one: the updates cost the same either way.
        self.metrics = metrics if metrics is not None else ReplicaManagerMetrics()

    def _epoch_field(self) -> dict[str, int]:
        return {} if self.controller_epoch is None else {"controller_epoch": self.controller_epoch}

    # ------------------------------------------------------------------ leadership

    def on_became_leader(self, partition: Partition) -> None:
        self._journal.emit_partition(
            "became_leader",
            partition.tp,
            **self._epoch_field(),
            leader_epoch=partition.leader_epoch,
            leader_id=partition.local_broker_id,
            isr=list(partition.isr),
            replicas=list(partition.assigned_replicas),
            log_end_offset=partition.log_end_offset,
            high_watermark=partition.high_watermark,
        )
        self.metrics.update(partition)
        self.on_offsets_changed(partition)

    def on_epoch_assigned(self, partition: Partition) -> None:
        """A leader cached its new epoch at its LEO (``leader_epoch_start_offset``)."""
        self._journal.emit_partition(
            "epoch_assigned",
            partition.tp,
            leader_epoch=partition.leader_epoch,
            start_offset=partition.leader_epoch_start_offset,
        )

    def on_became_follower(self, partition: Partition) -> None:
        self._journal.emit_partition(
            "became_follower",
            partition.tp,
            **self._epoch_field(),
            leader_epoch=partition.leader_epoch,
            leader_id=partition.leader_id,
            log_end_offset=partition.log_end_offset,
            high_watermark=partition.high_watermark,
        )
        self.metrics.update(partition)

    def on_partition_stopped(self, tp: TopicPartition, deleted: bool) -> None:
        if deleted:
            self._offsets.forget(tp)
        self._journal.emit_partition("partition_stopped", tp, deleted=deleted, **self._epoch_field())
        self.metrics.remove(tp)

    def on_partition_config_changed(self, partition: Partition) -> None:
        """The partition's ``min.insync.replicas`` changed (not journaled: only the metrics change)."""
        self.metrics.update(partition)

    # ------------------------------------------------------------------ replica state

    def on_isr_changed(self, partition: Partition, change: IsrChange) -> None:
        self._journal.emit_partition(
            "isr_changed",
            partition.tp,
            leader_epoch=partition.leader_epoch,
            old_isr=change.old_isr,
            isr=change.new_isr,
            reason=change.reason,
            high_watermark=partition.high_watermark,
            log_end_offset=partition.log_end_offset,
        )
        self.metrics.on_isr_change(change)
        self.metrics.update(partition)

    def on_truncated(
        self,
        partition: Partition,
        truncate_to: int,
        reason: str,
        *,
        log_end_offset_before: int,
        high_watermark_before: int,
    ) -> None:
        self._journal.emit_partition(
            "truncated",
            partition.tp,
            truncate_to=truncate_to,
            reason=reason,
            leader_id=partition.leader_id,
            leader_epoch=partition.leader_epoch,
            log_end_offset_before=log_end_offset_before,
            log_end_offset=partition.log_end_offset,
            high_watermark_before=high_watermark_before,
            high_watermark=partition.high_watermark,
            latest_epoch=partition.log.leader_epoch_cache.latest_epoch(),
        )
        self.on_offsets_changed(partition)

    def on_fetch_error(
        self, tp: TopicPartition, partition: Partition | None, error_code: int, message: str
    ) -> None:
        """A follower's fetch of ``tp`` failed; ``partition`` (None if no longer hosted) gives the leader it
        was fetching from."""
        self._journal.emit_partition(
            "fetch_error",
            tp,
            error_code=error_code,
            error=error_name(error_code),
            reason=message,
            leader_id=None if partition is None else partition.leader_id,
            leader_epoch=None if partition is None else partition.leader_epoch,
        )

    # ------------------------------------------------------------------ offsets

    def on_offsets_changed(self, partition: Partition) -> None:
        """LEO, HW or log start offset may have moved (cheap: written at the next ``flush_offsets``)."""
        self._offsets.observe(
            partition.tp, partition.log_end_offset, partition.high_watermark, partition.log_start_offset
        )

    def flush_offsets(self) -> int:
        """Writes one ``offsets`` line per partition whose offsets changed since the last flush."""
        return self._offsets.flush()
