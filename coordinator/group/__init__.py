"""Consumer groups (Kafka's classic protocol, docs/clients.md): the pure group state machine
(``group_metadata``, ``coordinator_core``), the replay of ``__consumer_offsets`` (``loader``) and the
coordinator's trio shell (``coordinator``)."""
