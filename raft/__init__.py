"""The controller quorum's Raft (Kafka's ``raft`` module, KIP-595), as a pure core.

``KafkaRaftClient`` (``raft_client.py``) is a synchronous state machine with an injected clock and random
generator and no sockets: requests and responses come in as :mod:`raft.messages` values, and what
must be sent goes out as effects. ``QuorumState`` (``quorum_state.py``) holds the epoch states of
``epoch_states.py`` and writes the election state (``election_state.py``) before any transition is
acted on. The metadata log is reached through the ``RaftLog`` interface (``raft_log.py``); the controller's
shell gives it the project's own ``Log`` (``metadata_log.py``), the tests an in-memory one.
"""
