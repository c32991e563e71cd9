"""What the transaction coordinator writes to and reads back from ``__transaction_state``: one batch with
one record per state change (key: the transactional id; value: its ``TransactionLogValue``), and the replay
of a partition into the last value of each id (Kafka's ``loadTransactionsForTxnTopicPartition``: the last
record of a key wins, a tombstone removes it). Pure: the shell hands the batches over."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from coordinator.transaction.transaction_metadata import TxnTransitMetadata
from protocol.errors import CorruptRecordError
from protocol.records import Buffer, Record, build_batch, decode_records, read_header
from protocol.txn_records import TransactionLogValue, decode_key, decode_value, encode_key, encode_value

log = logging.getLogger(__name__)

_CONTROL_BIT = 0x20  # a batch's attributes bit 5


def transaction_batch(transactional_id: str, transit: TxnTransitMetadata, timestamp_ms: int) -> bytes:
    record = Record(
        offset_delta=0,
        timestamp_delta=0,
        key=encode_key(transactional_id),
        value=encode_value(transit.to_log_value()),
    )
    return build_batch([record], base_timestamp=timestamp_ms)


@dataclass
class TransactionLoader:
    """Folds the batches of one ``__transaction_state`` partition, oldest first."""

    transactions: dict[str, TransactionLogValue] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0

    def add_batches(self, buf: Buffer) -> None:
        pos = 0
        view = memoryview(buf)
        while pos < len(view):
            header = read_header(view, pos)
            try:
                _, records = decode_records(view, pos)
            except CorruptRecordError as exc:
                log.warning("skipping an unreadable batch at offset %d: %s", header.base_offset, exc)
                self.skipped += header.records_count
                records = []
            pos += header.size
            if header.attributes & _CONTROL_BIT:  # a marker: no state of its own
                continue
            for record in records:
                self.records += 1
                try:
                    if record.key is None:
                        raise CorruptRecordError("a record without a key")
                    txn_id = decode_key(bytes(record.key))
                    if record.value is None:
                        self.transactions.pop(txn_id, None)
                    else:
                        self.transactions[txn_id] = decode_value(bytes(record.value))
                except CorruptRecordError as exc:
                    log.warning("skipping a record of the batch at offset %d: %s", header.base_offset, exc)
                    self.skipped += 1
