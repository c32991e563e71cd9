"""Transactions (KIP-98, docs/transactions.md): the pure state machine (``transaction_metadata``,
``coordinator_core``), the replay of ``__transaction_state`` (``txn_log``) and the coordinator's trio
shell (``coordinator``), which sends the markers through ``marker_channel``."""
