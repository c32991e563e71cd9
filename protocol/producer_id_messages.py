"""INIT_PRODUCER_ID (22) and ALLOCATE_PRODUCER_IDS (67): idempotent producers' ids (KIP-98, docs/clients.md).

Field names are Kafka's JSON-schema names in snake_case (``InitProducerIdRequest.json`` and friends).

- INIT_PRODUCER_ID, served by every broker (Kafka's encoding: versions 0-4, ``protocol.api_specs``):
  a producer asks for a producer id and epoch. ``producer_id`` and ``producer_epoch`` exist from Kafka's
  version 3 (-1 when the producer has none).
- ALLOCATE_PRODUCER_IDS, version 0, served by the controller: a broker asks for its next block of
  producer ids (Kafka's ``ProducerIdsBlock``: ``producer_id_start`` .. ``+ producer_id_len - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.schema import Int16, Int32, Int64


@dataclass(slots=True, kw_only=True)
class InitProducerIdRequest:
    transactional_id: str | None = None
    transaction_timeout_ms: Int32 = 0
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@dataclass(slots=True, kw_only=True)
class InitProducerIdResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@dataclass(slots=True, kw_only=True)
class AllocateProducerIdsRequest:
    broker_id: Int32
    broker_epoch: Int64 = -1


@dataclass(slots=True, kw_only=True)
class AllocateProducerIdsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    producer_id_start: Int64 = -1
    producer_id_len: Int32 = 0


__all__ = [
    "AllocateProducerIdsRequest",
    "AllocateProducerIdsResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
]
