"""How this broker's transaction coordinator reaches partition leaders with WRITE_TXN_MARKERS (what
``coordinator.transaction.marker_channel`` asks of its broker): the leader of a partition from the metadata
cache, and one request to one broker over a connection of the inter-broker listener, with this broker's
TLS and SASL (``protocol.security.current_client_security``, set for every task of the broker)."""

from __future__ import annotations

import logging
from typing import Any

from broker.metadata_cache import MetadataCache
from broker.peer_connections import PeerConnections
from coordinator.transaction.marker_channel import UNKNOWN, TxnMarkerEntry
from protocol.api_keys import ApiKeys
from protocol.client import open_connection
from protocol.common import TopicPartition
from protocol.errors import Errors

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS_VERSION = 0  # isrsim's encoding: version 0 (Kafka's version 1 body)


class TxnMarkerSender:
    def __init__(
        self,
        broker_id: int,
        metadata_cache: MetadataCache,
        *,
        request_timeout_s: float = 10.0,
        peers: PeerConnections | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.metadata_cache = metadata_cache
        self.request_timeout_s = request_timeout_s
        # The connections to the leaders, kept between markers (None: a connection per request).
        self.peers = peers

    def leader_of(self, tp: TopicPartition) -> int | None:
        meta = self.metadata_cache.partitions.get(tp)
        if meta is None:
            known_topic = any(t == tp[0] for t, _ in self.metadata_cache.partitions)
            return None if known_topic else UNKNOWN
        if meta.leader < 0 or meta.leader not in self.metadata_cache.brokers:
            return None
        return meta.leader

    async def send(self, broker_id: int, entry: TxnMarkerEntry) -> dict[TopicPartition, Errors]:
        endpoint = self.metadata_cache.alive_broker(broker_id)
        if endpoint is None:
            return dict.fromkeys(entry.partitions, Errors.NOT_LEADER_OR_FOLLOWER)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in entry.partitions:
            by_topic.setdefault(topic, []).append(partition)
        body: dict[str, Any] = {
            "markers": [
                {
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "transaction_result": entry.commit,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in sorted(by_topic.items())],
                    "coordinator_epoch": entry.coordinator_epoch,
                }
            ]
        }
        if self.peers is not None:
            answer = await self.peers.request(
                broker_id,
                ApiKeys.WRITE_TXN_MARKERS,
                body,
                api_version=WRITE_TXN_MARKERS_VERSION,
                timeout=self.request_timeout_s,
            )
        else:
            async with open_connection(
                endpoint.host,
                endpoint.port,
                client_id=f"broker-{self.broker_id}-txn-markers",
                connect_timeout=self.request_timeout_s,
            ) as conn:
                answer = await conn.request(
                    ApiKeys.WRITE_TXN_MARKERS,
                    body,
                    api_version=WRITE_TXN_MARKERS_VERSION,
                    timeout=self.request_timeout_s,
                )
        out: dict[TopicPartition, Errors] = {}
        if answer.get("error_code"):
            return dict.fromkeys(entry.partitions, _error(answer["error_code"]))
        for marker in answer.get("markers", []):
            for topic in marker.get("topics", []):
                for p in topic.get("partitions", []):
                    out[(topic["name"], p["partition_index"])] = _error(p.get("error_code", 0))
        return out


def _error(code: int) -> Errors:
    try:
        return Errors(code)
    except ValueError:
        return Errors.UNKNOWN_SERVER_ERROR
