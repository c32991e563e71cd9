"""What a coordinator needs of the broker it runs in (Kafka's ``PartitionWriter`` of the coordinator
runtime): the partitions of its internal topic hosted here, their logs, and the acks=all append path.

The broker's ``ReplicaManager`` is one; a coordinator never imports the broker, so the arrow goes one way
(``broker`` -> ``coordinator``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from protocol.common import TopicPartition
from storage.log import Log
from storage.producer_state_entry import AppendOrigin

# Called with the partitions this broker now leads (with their leader epochs) and those it resigned.
LeadershipListener = Callable[[list[tuple[TopicPartition, int]], list[TopicPartition]], None]


class HostedPartition(Protocol):
    """A replica hosted by this broker, as a coordinator reads it."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def log(self) -> Log: ...


class LiveBrokers(Protocol):
    @property
    def brokers(self) -> Mapping[int, object]: ...


class PartitionWriter(Protocol):
    @property
    def partitions(self) -> Mapping[TopicPartition, HostedPartition]: ...

    @property
    def metadata_cache(self) -> LiveBrokers: ...

    @property
    def leadership_listeners(self) -> list[LeadershipListener]: ...

    def get_partition_or_error(self, tp: TopicPartition) -> HostedPartition: ...

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries: dict[TopicPartition, bytes],
        respond: Callable[[dict[TopicPartition, Any]], None],
        *,
        internal_topics_allowed: bool = False,
        client_id: str = "",
        # COORDINATOR: a coordinator's own write (Kafka's AppendOrigin): producer epochs checked, no
        # sequences (transactional offset commits, transaction markers).
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> None: ...
