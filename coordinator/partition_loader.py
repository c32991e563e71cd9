"""Loading a coordinator's partition when this broker becomes its leader (Kafka's coordinator runtime
``CoordinatorLoader``): the group and the transaction coordinators both replay their internal topic's
partition from its log start offset to its log end, a buffer at a time, yielding to the loop between reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from coordinator.partition_writer import PartitionWriter
from protocol.common import TopicPartition
from protocol.errors import KafkaError
from protocol.records import iter_batches

log = logging.getLogger(__name__)


async def replay_partition(
    writer: PartitionWriter,
    tp: TopicPartition,
    buffer_size: int,
    add_batches: Callable[[bytes], None],
    still_current: Callable[[], bool],
    broker_id: int,
) -> bool:
    """Hand every batch of ``tp``'s log to ``add_batches``, in order, whole reads at a time.

    Returns False if the load was superseded while it ran (``still_current`` turned false: the partition
    was resigned or elected again). A read that fails ends the load where it stopped: what was read is
    served, and the failure is logged for the operator.
    """
    offset = 0
    try:
        part = writer.get_partition_or_error(tp)
        offset = part.log.log_start_offset
        end = part.log.log_end_offset
        while offset < end:
            if not still_current():
                return False
            data = part.log.read(offset, buffer_size, max_offset=end)
            if not data:
                break
            add_batches(data)
            offset = next_offset(data)
            await trio.sleep(0)
    except (KafkaError, OSError, ValueError) as exc:
        log.error("broker %d: loading %s-%d stopped at offset %d: %s", broker_id, tp[0], tp[1], offset, exc)
    return still_current()


def next_offset(data: bytes) -> int:
    """The offset after the last batch in ``data`` (whole batches, as ``Log.read`` returns them)."""
    last = -1
    for _, header in iter_batches(data, validate=False):
        last = header.next_offset
    if last < 0:
        raise ValueError("no batch in a non-empty read")
    return last
