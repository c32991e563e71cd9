"""A transactional workload through Kafka's own C client (librdkafka, confluent-kafka: the ``clients``
extra): ``isrsim produce TOPIC --transactional-id ID`` (docs/transactions.md).

The producer initializes its transactional id (InitProducerId: fencing any earlier producer of it), then
writes ``count`` numbered records in transactions of ``transaction_records`` each, committing them, or
aborting every ``abort_every``-th one. A read_committed consumer of the topic then reads exactly the
committed transactions' records (``txn-<transaction>-<record>`` values)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kit.errors import KitError
from kit.librdkafka_producer import producer_config, require_librdkafka

if TYPE_CHECKING:
    from kit.cluster_client import Address


class TransactionFailed(KitError):
    """The transactional producer hit an error it cannot go on from (fenced, authorization, timeout)."""


@dataclass
class TransactionStats:
    committed: int = 0
    aborted: int = 0
    committed_records: int = 0
    aborted_records: int = 0


def run_transactions(
    bootstrap: Sequence[Address],
    topic: str,
    transactional_id: str,
    count: int,
    *,
    transaction_records: int = 100,
    abort_every: int = 0,
    record_size: int = 100,
    transaction_timeout_ms: int = 60_000,
    properties: Mapping[str, str] | None = None,
    on_transaction: Callable[[TransactionStats], None] | None = None,
) -> TransactionStats:
    require_librdkafka("produce --transactional-id")
    from confluent_kafka import KafkaException, Producer

    config: dict[str, Any] = producer_config(
        bootstrap, client_id=f"isrsim-txn-{transactional_id}", linger_ms=5, properties=properties
    )
    config["transactional.id"] = transactional_id
    config["transaction.timeout.ms"] = transaction_timeout_ms
    config["message.timeout.ms"] = transaction_timeout_ms  # librdkafka: at most the transaction's
    stats = TransactionStats()
    timeout_s = transaction_timeout_ms / 1000
    producer: Any = None
    try:
        producer = Producer(config)
        producer.init_transactions(timeout_s)
        done = 0
        txn = 0
        while done < count:
            txn += 1
            n = min(transaction_records, count - done)
            abort = abort_every > 0 and txn % abort_every == 0
            producer.begin_transaction()
            for i in range(n):
                value = f"txn-{txn}-{i}".encode().ljust(record_size, b".")
                while True:
                    try:
                        producer.produce(topic, value=value)
                        break
                    except BufferError:
                        producer.poll(0.05)
            if abort:
                producer.flush(timeout_s)
                producer.abort_transaction(timeout_s)
                stats.aborted += 1
                stats.aborted_records += n
            else:
                producer.commit_transaction(timeout_s)
                stats.committed += 1
                stats.committed_records += n
            done += n
            if on_transaction is not None:
                on_transaction(stats)
    except KafkaException as exc:
        error = exc.args[0]
        raise TransactionFailed(
            f"transactional id {transactional_id!r}: {error.name()}: {error.str()} "
            f"(after {stats.committed} committed and {stats.aborted} aborted transactions)"
        ) from None
    finally:
        if producer is not None:
            producer.flush(1)
    return stats
