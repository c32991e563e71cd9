"""How a replica fetcher talks to the leader of its partitions (Kafka's ``LeaderEndPoint`` and
``RemoteLeaderEndPoint``).

``ReplicaFetcher`` only ever calls a ``LeaderEndPoint``: FETCH, OFFSET_FOR_LEADER_EPOCH and the two
LIST_OFFSETS lookups of an out-of-range reset, with typed requests and answers. ``RemoteLeaderEndPoint``
speaks them over one connection (``protocol.client``) with the message dataclasses of ``protocol.messages``;
the unit tests use an in-memory leader instead.

Failures come back in three ways:

* ``FetchFailed``: no answer at all (connection refused or lost, timeout). The fetcher backs off every
  partition (NETWORK_EXCEPTION) and connects again.
* an error code for a partition: ``EpochEndOffset.error_code``, the partitions of a ``FetchResponse``, or a
  ``KafkaError`` raised by ``fetch_latest_offset`` / ``fetch_earliest_offset``;
* ``InvalidLeaderResponse`` (an answer that does not match its schema) or any other exception: the
  fetcher's catch-all drops the connection and backs off every partition (UNKNOWN_SERVER_ERROR).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, TypeVar

import trio

from fetcher.truncation import EpochData, EpochEndOffset
from protocol.api_keys import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    ApiKeys,
)
from protocol.client import ConnectionClosed, KafkaConnection, connect_stream, open_tcp_stream
from protocol.common import BrokerEndpoint, TopicPartition, error_name
from protocol.errors import Errors, InvalidRequestError, KafkaError
from protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsRequestPartition,
    ListOffsetsRequestTopic,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestPartition,
    OffsetForLeaderEpochRequestTopic,
    OffsetForLeaderEpochResponse,
)
from protocol.schema import from_body

log = logging.getLogger(__name__)

T = TypeVar("T")


class FetchFailed(Exception):
    """The leader did not answer (connection refused or lost, timeout): every partition of the fetcher backs
    off."""


class InvalidLeaderResponse(Exception):
    """The leader's answer does not match the API's response schema."""


class LeaderEndPoint(Protocol):
    """The leader a fetcher fetches from (Kafka's ``LeaderEndPoint``)."""

    @property
    def broker_endpoint(self) -> BrokerEndpoint: ...

    def connect(self) -> AbstractAsyncContextManager[object]:
        """Hold a connection to the leader for the duration of the block (the fetcher's ``run`` enters it
        again after a back-off when the connection is lost). Raises ``FetchFailed`` if it cannot connect."""
        ...

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        """Send one FETCH and return the leader's answer as it is (the fetcher checks it against its fetch
        session)."""
        ...

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, EpochData]
    ) -> dict[TopicPartition, EpochEndOffset]:
        """OFFSET_FOR_LEADER_EPOCH: the end offset of each partition's ``leader_epoch`` on the leader. Every
        partition asked about is answered; one the leader's answer leaves out carries an error."""
        ...

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        """LIST_OFFSETS (latest) as a follower: the leader's log end offset. A partition error raises
        ``KafkaError`` (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER ...)."""
        ...

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        """LIST_OFFSETS (earliest): the leader's log start offset. Errors as ``fetch_latest_offset``."""
        ...


class RemoteLeaderEndPoint:
    """A ``LeaderEndPoint`` over the wire (Kafka's ``RemoteLeaderEndPoint``): one connection at a time,
    requests sent as follower ``replica_id``."""

    def __init__(
        self,
        broker_endpoint: BrokerEndpoint,
        *,
        replica_id: int,
        client_id: str,
        socket_timeout_ms: int,
    ) -> None:
        self._broker_endpoint = broker_endpoint
        self.replica_id = replica_id
        self.client_id = client_id
        self.socket_timeout_ms = socket_timeout_ms
        self._conn: KafkaConnection | None = None

    @property
    def broker_endpoint(self) -> BrokerEndpoint:
        return self._broker_endpoint

    def __repr__(self) -> str:
        ep = self._broker_endpoint
        return f"RemoteLeaderEndPoint(broker={ep.broker_id}, {ep.host}:{ep.port})"

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[None]:
        ep = self._broker_endpoint
        try:
            with trio.fail_after(self.socket_timeout_ms / 1000):
                stream = await open_tcp_stream(ep.host, ep.port)  # held while partitioned (net faults)
        except (OSError, trio.TooSlowError) as exc:
            raise FetchFailed(f"cannot connect to {ep.host}:{ep.port}: {exc or type(exc).__name__}") from exc
        # TLS and SASL as the broker's inter-broker listener asks (protocol.security.current_client_security).
        async with connect_stream(stream, client_id=self.client_id, server_hostname=ep.host) as conn:
            self._conn = conn
            try:
                yield
            finally:
                self._conn = None

    async def _send(self, api_key: ApiKeys, request: Any, response_cls: type[T], timeout_ms: int) -> T:
        conn = self._conn
        if conn is None:
            raise FetchFailed(f"{api_key.name}: not connected to leader {self._broker_endpoint.broker_id}")
        try:
            body = await conn.request(api_key, request, timeout=timeout_ms / 1000)
        except (ConnectionClosed, trio.TooSlowError) as exc:
            raise FetchFailed(f"{api_key.name} failed: {exc or type(exc).__name__}") from exc
        # A request the leader could not take at all (docs/protocol.md: UNSUPPORTED_VERSION, INVALID_REQUEST)
        # is answered with {error_code, error_message} instead of the API's response.
        if "error_code" not in _fields_of(response_cls):
            code = body.get("error_code", Errors.NONE)
            if isinstance(code, int) and code != Errors.NONE:
                raise KafkaError(_error(code), f"{api_key.name}: {body.get('error_message') or ''}")
        try:
            return from_body(response_cls, body)
        except InvalidRequestError as exc:
            raise InvalidLeaderResponse(f"{api_key.name} response: {exc.message}") from exc

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        # The leader may hold a FETCH for up to max_wait_ms before answering.
        timeout_ms = self.socket_timeout_ms + request.max_wait_ms
        return await self._send(ApiKeys.FETCH, request, FetchResponse, timeout_ms)

    async def fetch_epoch_end_offsets(
        self, partitions: Mapping[TopicPartition, EpochData]
    ) -> dict[TopicPartition, EpochEndOffset]:
        topics: dict[str, list[OffsetForLeaderEpochRequestPartition]] = {}
        for (topic, partition), data in partitions.items():
            topics.setdefault(topic, []).append(
                OffsetForLeaderEpochRequestPartition(
                    partition=partition,
                    current_leader_epoch=data.current_leader_epoch,
                    leader_epoch=data.leader_epoch,
                )
            )
        request = OffsetForLeaderEpochRequest(
            replica_id=self.replica_id,
            topics=[OffsetForLeaderEpochRequestTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        )
        end_offsets: dict[TopicPartition, EpochEndOffset] = {}
        # A partition the leader did not answer is an error for that partition, as in Kafka when the whole
        # request fails: the request's error if it has one, else UNKNOWN_SERVER_ERROR.
        missing = Errors.UNKNOWN_SERVER_ERROR
        try:
            response = await self._send(
                ApiKeys.OFFSET_FOR_LEADER_EPOCH,
                request,
                OffsetForLeaderEpochResponse,
                self.socket_timeout_ms,
            )
        except KafkaError as exc:
            missing = exc.error
        else:
            for t in response.topics:
                for p in t.partitions:
                    tp = (t.topic, p.partition)
                    if tp in partitions:
                        end_offsets[tp] = EpochEndOffset(p.error_code, p.leader_epoch, p.end_offset)
        for tp in partitions:
            if tp not in end_offsets:
                end_offsets[tp] = EpochEndOffset(int(missing), UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        return end_offsets

    async def fetch_latest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, LATEST_TIMESTAMP)

    async def fetch_earliest_offset(self, tp: TopicPartition, current_leader_epoch: int) -> int:
        return await self._list_offset(tp, current_leader_epoch, EARLIEST_TIMESTAMP)

    async def _list_offset(self, tp: TopicPartition, current_leader_epoch: int, timestamp: int) -> int:
        request = ListOffsetsRequest(
            replica_id=self.replica_id,
            topics=[
                ListOffsetsRequestTopic(
                    name=tp[0],
                    partitions=[
                        ListOffsetsRequestPartition(
                            partition_index=tp[1],
                            current_leader_epoch=current_leader_epoch,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        response = await self._send(
            ApiKeys.LIST_OFFSETS, request, ListOffsetsResponse, self.socket_timeout_ms
        )
        for t in response.topics:
            for p in t.partitions:
                if (t.name, p.partition_index) != tp:
                    continue
                if p.error_code != Errors.NONE:
                    raise KafkaError(_error(p.error_code), f"LIST_OFFSETS: {error_name(p.error_code)}")
                return p.offset
        raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"LIST_OFFSETS: no answer for {tp[0]}-{tp[1]}")


def _fields_of(cls: type) -> frozenset[str]:
    return frozenset(getattr(cls, "__dataclass_fields__", ()))


def _error(code: int) -> Errors:
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR
