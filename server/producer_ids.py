"""Producer id blocks (KIP-98, Kafka's ``ProducerIdsBlock`` and ``ProducerIdControlManager``): pure.

The controller hands out producer ids in blocks of 1000 (``PRODUCER_ID_BLOCK_SIZE``, Kafka's), one block
per ALLOCATE_PRODUCER_IDS, and remembers durably where the next block starts (``ProducerIdsRecord``, Kafka's
metadata record of the same name: the next first id, and the broker and broker epoch the last block went
to). A broker serves INIT_PRODUCER_ID from its current block (``broker.producer_id_manager``). Ids are
never handed out twice, across controller and broker restarts alike: a block is persisted before it is
answered, and a broker that restarts asks for a new block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import Errors, KafkaError

PRODUCER_ID_BLOCK_SIZE = 1000
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """``size`` ids from ``first_producer_id``, assigned to ``assigned_broker_id``."""

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


EMPTY_BLOCK = ProducerIdsBlock(-1, 0, 0)


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """What the controller keeps durably: where the next block starts, and who got the last one."""

    next_producer_id: int = 0
    broker_id: int = -1
    broker_epoch: int = -1

    def to_json(self) -> dict[str, int]:
        return {
            "next_producer_id": self.next_producer_id,
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
        }

    @classmethod
    def from_json(cls, data: Any) -> ProducerIdsRecord:
        if data is None:
            return cls()
        record = cls(int(data["next_producer_id"]), int(data["broker_id"]), int(data["broker_epoch"]))
        if record.next_producer_id < 0:
            raise ValueError(f"next_producer_id {record.next_producer_id} is negative")
        return record


def generate_next_block(
    record: ProducerIdsRecord, broker_id: int, broker_epoch: int
) -> tuple[ProducerIdsBlock, ProducerIdsRecord]:
    """The next block for ``broker_id`` and the record to persist before answering with it."""
    first = record.next_producer_id
    if first > INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
        raise KafkaError(
            Errors.UNKNOWN_SERVER_ERROR,
            "exhausted all producer ids: the next block's end would exceed the int64 range",
        )
    block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
    return block, ProducerIdsRecord(block.next_block_first_id, broker_id, broker_epoch)


__all__ = [
    "EMPTY_BLOCK",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdsBlock",
    "ProducerIdsRecord",
    "generate_next_block",
]
