"""What both ends of an incremental fetch session (KIP-227) agree on: the session metadata carried by every
FETCH request (``session_id``, ``session_epoch``) and the per-partition request data.

These mirror Kafka's ``FetchMetadata`` and ``FetchRequest.PartitionData`` (clients module). They live in the
fetcher package because the dependency arrow is broker -> fetcher -> protocol: the broker's session cache
(``broker.fetch_session``) imports them from here, exactly as Kafka's core uses the clients' classes.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.api_keys import NO_PARTITION_LEADER_EPOCH

# The session id used by clients with no session.
INVALID_SESSION_ID = 0
# In a request: create (or re-create) a session. Also the epoch of a full request.
INITIAL_EPOCH = 0
# In a request: close any existing session and do not create a new one (a "sessionless" request).
FINAL_EPOCH = -1

_INT32_MAX = 2**31 - 1


def next_epoch(prev_epoch: int) -> int:
    """The epoch after ``prev_epoch``: FINAL_EPOCH stays final, and the epoch wraps from int32 max to 1
    (never back to INITIAL_EPOCH, which would mean "new session")."""
    if prev_epoch < 0:
        return FINAL_EPOCH
    if prev_epoch == _INT32_MAX:
        return 1
    return prev_epoch + 1


@dataclass(frozen=True, slots=True)
class FetchMetadata:
    """The (session id, epoch) pair of one fetch request."""

    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full request lists every partition the client wants; an incremental one only the changes."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> FetchMetadata:
        """Close the current session (if any) and ask for a new one."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        """The metadata of the first incremental request of a session the broker has just created."""
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    def __str__(self) -> str:
        sid = "INVALID" if self.session_id == INVALID_SESSION_ID else str(self.session_id)
        if self.epoch == INITIAL_EPOCH:
            epoch = "INITIAL"
        elif self.epoch == FINAL_EPOCH:
            epoch = "FINAL"
        else:
            epoch = str(self.epoch)
        return f"(sessionId={sid}, epoch={epoch})"


# A client that has never talked to this broker: full request, please create a session.
INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


@dataclass(frozen=True, slots=True)
class FetchRequestPartitionData:
    """One partition of a FETCH request (Kafka's ``FetchRequest.PartitionData``).

    ``current_leader_epoch`` is NO_PARTITION_LEADER_EPOCH (-1) when the fetcher does not want the leader to
    validate its epoch (Kafka's ``Optional.empty()``).
    """

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_PARTITION_LEADER_EPOCH
    last_fetched_epoch: int = NO_PARTITION_LEADER_EPOCH  # -1: none (Kafka's Optional.empty())
