"""A broker core without sockets for the replica manager and KafkaApis tests: a real ``LogManager`` over
``tmp_path``, a real ``ReplicaManager`` with its purgatories, listener and journal, ``KafkaApis`` with a real
``FetchManager``, all on one ``MockTime``; a fetcher manager that records what it is told; and requests
that go through the real frame and header codecs into a ``server.request_channel.Request`` whose response is
read back from its frame."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from broker.delayed import DelayedOperationPurgatory
from broker.fetch_session import FetchManager
from broker.fetch_session_cache import FetchSessionCache
from broker.kafka_apis import KafkaApis
from broker.metadata_cache import MetadataCache
from broker.partition import LeaderAndIsrState
from broker.replica_manager import ReplicaManager, ReplicaManagerSettings
from broker.replica_state_listener import ReplicaStateListener
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.common import BrokerEndpoint, MockTime, TopicPartition
from protocol.errors import Errors
from protocol.framing import decode_request, decode_response, encode_request
from protocol.records import build_simple_batch, iter_batches
from protocol.replication import FetchStateView, InitialFetchState, TruncationMode
from protocol.schema import from_body, to_body
from server.journal import Journal, read_journal
from server.request_channel import Request
from server.security.principal import ANONYMOUS, KafkaPrincipal
from storage.log import LogConfig
from storage.log_manager import LogManager

T = TypeVar("T")

LOCAL = 0  # this broker's id
LAG_MS = 10_000  # replica.lag.time.max.ms
TP: TopicPartition = ("t", 0)


def endpoint(broker_id: int) -> BrokerEndpoint:
    return BrokerEndpoint(broker_id, "127.0.0.1", 9000 + broker_id)


def batch(count: int) -> bytes:
    return build_simple_batch([b"v%d" % i for i in range(count)], base_timestamp=1_000)


def record_count(records: bytes) -> int:
    return sum(h.records_count for _, h in iter_batches(records))


@dataclass
class RecordingFetcherManager:
    """``fetcher.interface.FetcherManagerLike`` that records the replica manager's calls."""

    added: dict[TopicPartition, InitialFetchState] = field(default_factory=dict)
    removed: list[TopicPartition] = field(default_factory=list)
    states: dict[TopicPartition, FetchStateView] = field(default_factory=dict)

    def add_fetcher_for_partitions(self, states: Mapping[TopicPartition, InitialFetchState]) -> None:
        self.added.update(states)

    def remove_fetcher_for_partitions(
        self, tps: Iterable[TopicPartition], *, shutdown_idle: bool = True
    ) -> None:
        self.removed.extend(tps)

    def shutdown_idle_fetchers(self) -> None:
        return None

    def fetch_state(self, tp: TopicPartition) -> FetchStateView | None:
        return self.states.get(tp)


class Broker:
    """Broker ``LOCAL`` as ``KafkaServer`` wires it, minus the network and the periodic tasks."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        min_isr: int = 1,
        clock: MockTime | None = None,
        truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH,
    ) -> None:
        self.clock = clock or MockTime(1_000_000)
        self.journal_path = tmp_path / "events.jsonl"
        self.journal = Journal(self.journal_path, LOCAL, clock_ms=self.clock)
        self.log_dir = tmp_path / "data"
        self.log_manager = LogManager(self.log_dir, LOCAL, "cluster", LogConfig(), clock=self.seconds)
        self.log_manager.check_meta_properties()
        self.log_manager.load_logs()
        self.produce_purgatory = DelayedOperationPurgatory("Produce", clock=self.seconds)
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch", clock=self.seconds)
        self.metadata_cache = MetadataCache(endpoint(LOCAL))
        self.rm = ReplicaManager(
            ReplicaManagerSettings(
                broker_id=LOCAL,
                replica_lag_time_max_ms=LAG_MS,
                min_insync_replicas=min_isr,
                truncation_mode=truncation_mode,
            ),
            self.log_manager,
            self.metadata_cache,
            ReplicaStateListener(self.journal),
            clock_ms=self.clock,
            produce_purgatory=self.produce_purgatory,
            fetch_purgatory=self.fetch_purgatory,
        )
        self.fetchers = RecordingFetcherManager()
        self.rm.fetcher_manager = self.fetchers
        self.session_cache = FetchSessionCache(10, 1_000, random.Random(7))
        self.apis = KafkaApis(self.rm, FetchManager(self.session_cache, self.clock))

    def seconds(self) -> float:
        """The same clock in seconds, for the logs and the purgatories."""
        return self.clock() / 1000

    # ------------------------------------------------------------------ the controller's word

    def leader_and_isr(
        self,
        leader: int,
        leader_epoch: int,
        isr: Sequence[int],
        replicas: Sequence[int],
        *,
        tp: TopicPartition = TP,
        controller_epoch: int = 1,
        partition_epoch: int = 0,
    ) -> tuple[Errors, dict[TopicPartition, Errors]]:
        state = LeaderAndIsrState(leader, leader_epoch, list(isr), list(replicas), partition_epoch)
        live = [endpoint(b) for b in sorted({*replicas, leader}) if b != LOCAL]
        return self.rm.become_leader_or_follower(1, controller_epoch, [(tp, state)], live)

    def journal_events(self, event: str | None = None) -> list[dict[str, Any]]:
        return read_journal(self.journal_path, event)


# ---------------------------------------------------------------------------------- in-memory requests


class InMemoryConnection:
    """A ``RequestConnection`` with no socket: where the request arrived, who sent it (anonymous unless a
    test sets ``principal``), and how many responses it was told are ready."""

    def __init__(self, listener_name: str = "PLAINTEXT") -> None:
        self.responses_ready = 0
        self.listener_name = listener_name
        self.principal: KafkaPrincipal = ANONYMOUS
        self.address = "127.0.0.1"
        self.closed = False

    def response_ready(self) -> None:
        self.responses_ready += 1


def make_request(
    api_key: ApiKeys, message: Any, *, correlation_id: int = 42, listener_name: str = "PLAINTEXT"
) -> Request:
    """``message`` (a ``protocol.messages`` dataclass, or a plain body) as the socket server would queue it,
    arrived on ``listener_name``: encoded as a frame, then decoded into header and body."""
    frame = encode_request(api_key, 0, correlation_id, "unit-test", to_body(message))
    header, body = decode_request(frame[4:])
    return Request(header, body, InMemoryConnection(listener_name), 0.0, len(frame))


def response_body(request: Request) -> dict[str, Any]:
    assert request.done, "no response yet"
    assert request.response_frame is not None, "completed without a response"
    correlation_id, body = decode_response(request.response_frame[4:])
    assert correlation_id == request.header.correlation_id
    return body


def response(request: Request, cls: type[T]) -> T:
    return from_body(cls, response_body(request))


def produce_request(acks: int, records: bytes, *, tp: TopicPartition = TP, timeout_ms: int = 30_000) -> Any:
    return m.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            m.ProduceRequestTopic(
                name=tp[0], partition_data=[m.ProduceRequestPartition(index=tp[1], records=records)]
            )
        ],
    )


def fetch_request(
    replica_id: int,
    fetch_offset: int,
    *,
    tp: TopicPartition = TP,
    current_leader_epoch: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    session_epoch: int = -1,
) -> m.FetchRequest:
    return m.FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        session_epoch=session_epoch,
        topics=[
            m.FetchRequestTopic(
                topic=tp[0],
                partitions=[
                    m.FetchRequestPartition(
                        partition=tp[1],
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=fetch_offset,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )
