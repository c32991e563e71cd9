"""ISR changes of a managed broker's leaders go through the controller (Kafka's
``AlterPartitionManager``, KIP-497).

A leader that wants to expand or shrink its ISR *proposes* the new ISR with :meth:`submit`; the ISR
changes only when the controller's answer arrives, through the callback. Until then the leader computes
its high watermark over the *maximal ISR* (the committed ISR plus the replicas it proposed to add; a
replica proposed for removal still counts), as Kafka's ``PendingExpandIsr`` / ``PendingShrinkIsr``:
``Partition.maximal_isr``.

At most one proposal per partition is in flight. Proposals made while a request is out are sent together
in the next ALTER_PARTITION. When the controller cannot be reached, answers NOT_CONTROLLER, or rejects the
whole request with STALE_BROKER_EPOCH (the broker is registering again), the same proposals are sent
again after a back-off. Any other answer, per partition, goes to the callback:
``callback(tp, error, leader_epoch, isr, partition_epoch)`` with the state the controller holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition, error_name
from protocol.errors import Errors
from protocol.schema import from_body
from server.backoff import ExponentialBackoff
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel

log = logging.getLogger(__name__)

AlterPartitionCallback = Callable[[TopicPartition, Errors, int, list[int], int], None]


@dataclass(slots=True)
class AlterPartitionItem:
    tp: TopicPartition
    leader_epoch: int
    new_isr: list[int]
    partition_epoch: int
    callback: AlterPartitionCallback


class AlterPartitionManager:
    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        broker_epoch: Callable[[], int],
        *,
        retry_backoff_s: float = 0.1,
    ) -> None:
        self.broker_id = broker_id
        self.channel = channel
        self.broker_epoch = broker_epoch
        self.retry_backoff_s = retry_backoff_s
        self.unsent: dict[TopicPartition, AlterPartitionItem] = {}
        self.in_flight: dict[TopicPartition, AlterPartitionItem] = {}
        self.requests_sent = 0
        self._wake = trio.Event()

    def submit(
        self,
        tp: TopicPartition,
        leader_epoch: int,
        new_isr: Sequence[int],
        partition_epoch: int,
        callback: AlterPartitionCallback,
    ) -> bool:
        """Proposes ``new_isr`` for ``tp``; False (nothing sent) if a proposal for it is already pending."""
        if tp in self.unsent or tp in self.in_flight:
            return False
        self.unsent[tp] = AlterPartitionItem(tp, leader_epoch, list(new_isr), partition_epoch, callback)
        self._wake.set()
        return True

    def pending(self, tp: TopicPartition) -> bool:
        return tp in self.unsent or tp in self.in_flight

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sends the proposals until cancelled. The channel's ``run`` must be running (the lifecycle
        manager runs it, or the owner does)."""
        task_status.started()
        backoff = ExponentialBackoff(self.retry_backoff_s)
        while True:
            while not self.unsent:
                await self._wake.wait()
                self._wake = trio.Event()
            batch, self.unsent = self.unsent, {}
            self.in_flight.update(batch)
            retry = await self._send(batch)
            for tp, item in batch.items():
                self.in_flight.pop(tp, None)
                if tp in retry:
                    self.unsent.setdefault(tp, item)
            if retry:
                await trio.sleep(backoff.next_s())
            else:
                backoff.reset()

    async def _send(self, batch: dict[TopicPartition, AlterPartitionItem]) -> set[TopicPartition]:
        """One ALTER_PARTITION for the batch; delivers the answers and returns what must be re-sent."""
        epoch = self.broker_epoch()
        if epoch < 0:
            return set(batch)
        topics: dict[str, list[cm.AlterPartitionRequestPartition]] = {}
        for (topic, index), item in sorted(batch.items()):
            topics.setdefault(topic, []).append(
                cm.AlterPartitionRequestPartition(
                    partition_index=index,
                    leader_epoch=item.leader_epoch,
                    new_isr=item.new_isr,
                    partition_epoch=item.partition_epoch,
                )
            )
        request = cm.AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=epoch,
            topics=[cm.AlterPartitionRequestTopic(topic_name=t, partitions=ps) for t, ps in topics.items()],
        )
        try:
            body = await self.channel.request(ApiKeys.ALTER_PARTITION, request)
            resp = from_body(cm.AlterPartitionResponse, body)
        except CONTROLLER_UNREACHABLE as exc:
            log.info("broker %d: ALTER_PARTITION not answered (%r); will retry", self.broker_id, exc)
            return set(batch)
        self.requests_sent += 1
        if resp.error_code != Errors.NONE:
            log.info(
                "broker %d: ALTER_PARTITION rejected: %s; will retry",
                self.broker_id,
                error_name(resp.error_code)
                if resp.error_code in Errors._value2member_map_
                else resp.error_code,
            )
            return set(batch)
        retry: set[TopicPartition] = set()
        answered: set[TopicPartition] = set()
        for t in resp.topics:
            for p in t.partitions:
                tp = (t.topic_name, p.partition_index)
                sent = batch.get(tp)
                if sent is None or tp in answered:
                    continue
                item = sent
                answered.add(tp)
                error = (
                    Errors(p.error_code)
                    if p.error_code in Errors._value2member_map_
                    else Errors.UNKNOWN_SERVER_ERROR
                )
                if error == Errors.NOT_CONTROLLER:
                    retry.add(tp)
                    continue
                if error != Errors.NONE:
                    log.info(
                        "broker %d: controller rejected ISR %s for %s-%d: %s",
                        self.broker_id,
                        item.new_isr,
                        tp[0],
                        tp[1],
                        error.name,
                    )
                item.callback(tp, error, p.leader_epoch, list(p.isr), p.partition_epoch)
        missing = set(batch) - answered - retry
        for tp in sorted(missing):
            batch[tp].callback(tp, Errors.UNKNOWN_SERVER_ERROR, -1, [], -1)
        return retry


__all__ = ["AlterPartitionCallback", "AlterPartitionItem", "AlterPartitionManager"]
