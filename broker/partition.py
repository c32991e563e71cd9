"""One topic-partition hosted by this broker (Kafka's ``Partition`` and ``Replica``).

The leader tracks every follower's fetch state, the ISR and the high watermark; a follower tracks the
leader's id and epoch and takes its HW from fetch responses. Synchronous, with an injected clock; the
replica manager owns the locking-free single-threaded access (everything runs on one trio thread).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from protocol.api_keys import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    NO_PARTITION_LEADER_EPOCH,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
)
from protocol.common import TopicPartition
from protocol.errors import Errors, KafkaError, OffsetOutOfRangeError
from protocol.records import BATCH_HEADER_SIZE, read_header
from protocol.replication import TruncationMode
from storage.log import MAX_TIMESTAMP, NO_TIMESTAMP, Log, LogAppendInfo
from storage.producer_state_entry import AppendOrigin
from storage.transaction_index import AbortedTxn
from storage.verification_guard import VerificationGuard

log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one follower (Kafka's ``Replica`` / ``ReplicaState``)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(
        self,
        follower_fetch_offset: int,
        follower_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
    ) -> None:
        """A follower fetched at ``follower_fetch_offset``: it has everything below it.

        It is caught up at ``fetch_time_ms`` if it reached the leader's LEO, or at the time of its previous
        fetch if it reached the LEO the leader had then (Kafka's ``Replica.updateFetchState``).
        """
        if follower_fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif follower_fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = follower_start_offset
        self.log_end_offset = follower_fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset(self, now_ms: int, leader_end_offset: int, is_new_leader: bool, in_sync: bool) -> None:
        """Kafka's ``resetReplicaState`` when this broker becomes leader or starts a new leader epoch.

        A follower outside the new ISR gets last-caught-up time 0, new leader or not, so it does not hold
        the high watermark back as a replica "about to join"; a re-elected leader also gives it last-fetch
        time 0, so only a fetch made in the new epoch counts towards its catching up."""
        self.last_caught_up_time_ms = now_ms if in_sync else 0
        if is_new_leader:
            self.log_start_offset = UNKNOWN_OFFSET
            self.log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_leader_log_end_offset = UNKNOWN_OFFSET
            self.last_fetch_time_ms = 0
        else:
            self.last_fetch_leader_log_end_offset = leader_end_offset
            self.last_fetch_time_ms = now_ms if in_sync else 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_time_ms <= max_lag_ms


@dataclass(frozen=True, slots=True)
class LeaderAndIsrState:
    """The part of a LEADER_AND_ISR partition state a partition acts on."""

    leader: int
    leader_epoch: int
    isr: Sequence[int]
    replicas: Sequence[int]
    partition_epoch: int = 0
    controller_epoch: int = 0
    is_new: bool = False


@dataclass(frozen=True, slots=True)
class LogReadResult:
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset): nothing read, the logs diverge
    last_stable_offset: int = -1
    # read_committed only: the aborted transactions overlapping the records read (Kafka's Fetch v4+
    # ``aborted_transactions``); None for read_uncommitted and followers.
    aborted_transactions: list[AbortedTxn] | None = None


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """What LIST_OFFSETS answers for one partition (Kafka's ``TimestampAndOffset``)."""

    timestamp: int
    offset: int
    leader_epoch: int


@dataclass(slots=True)
class IsrChange:
    old_isr: list[int]
    new_isr: list[int]
    reason: str
    lagging: dict[int, int] = field(default_factory=dict)


class Partition:
    def __init__(
        self,
        tp: TopicPartition,
        local_broker_id: int,
        log_: Log,
        *,
        clock_ms: Callable[[], int],
        replica_lag_time_max_ms: int,
        min_insync_replicas: int,
        high_watermark: int = 0,
        truncation_mode: TruncationMode = TruncationMode.LEADER_EPOCH,
    ) -> None:
        self.tp = tp
        self.truncation_mode = truncation_mode
        self.local_broker_id = local_broker_id
        self.log = log_
        self.clock_ms = clock_ms
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self.leader_id: int | None = None
        self.leader_epoch = NO_PARTITION_LEADER_EPOCH
        self.leader_epoch_start_offset: int | None = None
        self.partition_epoch = 0
        self.controller_epoch = 0
        self.assigned_replicas: list[int] = []
        self.isr: list[int] = []
        # Managed mode: ISR changes are proposed to the controller (ALTER_PARTITION) and applied only when
        # it answers; ``pending_isr`` is the proposal in flight. Unmanaged: the leader applies them itself.
        self.isr_proposer: Callable[[Partition, list[int], str], bool] | None = None
        self.pending_isr: list[int] | None = None
        # Managed mode: whether a broker is registered, unfenced and not shutting down (the live brokers of
        # the last UPDATE_METADATA): only those may join the ISR or hold the HW back as about to join it
        # (Kafka's isReplicaIsrEligible, KIP-841). None: every assigned replica is eligible.
        self.is_broker_eligible: Callable[[int], bool] | None = None
        self.remote_replicas: dict[int, ReplicaState] = {}
        self._high_watermark = min(max(high_watermark, log_.log_start_offset), log_.log_end_offset)

    # ------------------------------------------------------------------ views

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def is_under_min_isr(self) -> bool:
        return self.is_leader and len(self.isr) < self.min_insync_replicas

    def describe(self) -> str:
        return f"{self.tp[0]}-{self.tp[1]} (leader {self.leader_id}, epoch {self.leader_epoch})"

    # ------------------------------------------------------------------ leadership

    def make_leader(self, state: LeaderAndIsrState) -> bool:
        """Kafka's ``Partition.makeLeader``. Returns True if this broker was not the leader before."""
        now = self.clock_ms()
        is_new_leader = not self.is_leader
        is_new_leader_epoch = state.leader_epoch > self.leader_epoch
        self._update_assignment_and_isr(state.replicas, state.isr)
        if is_new_leader_epoch:
            start = self.log.log_end_offset
            # Cache the new epoch at the LEO now, before any record is written in it, so a follower that has
            # entries from a later epoch than any in this log still finds the right truncation point (Kafka
            # 2.1+, KAFKA-7415). Before, as in the older truncation modes, the epoch was cached by the first
            # append in it.
            if self.truncation_mode is TruncationMode.LEADER_EPOCH:
                self.log.assign_epoch(state.leader_epoch, start)
            for replica in self.remote_replicas.values():
                replica.reset(now, start, is_new_leader, replica.broker_id in state.isr)
            self.leader_epoch = state.leader_epoch
            self.leader_epoch_start_offset = start
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        self.leader_id = self.local_broker_id
        self.maybe_increment_leader_hw()
        return is_new_leader

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Kafka's ``Partition.makeFollower``. Returns True if the leader or its epoch changed."""
        is_new_leader_epoch = state.leader_epoch > self.leader_epoch
        self._update_assignment_and_isr(state.replicas, state.isr)
        self.leader_epoch = state.leader_epoch
        self.leader_epoch_start_offset = None
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        if self.leader_id == state.leader and not is_new_leader_epoch:
            return False
        self.leader_id = state.leader
        return True

    def update_in_epoch(self, state: LeaderAndIsrState) -> bool:
        """A LEADER_AND_ISR of the current leader and leader epoch with a newer partition epoch (an ISR or
        assignment change the controller made without a new leader epoch, KAFKA-15021): the ISR and
        replicas change, nothing else (no epoch start offset). Returns True if the HW moved (a leader whose
        ISR shrank).

        A follower the controller took out of the ISR is fenced or shutting down, which Kafka's leader
        learns from its metadata (``isReplicaIsrEligible``) and stops waiting for: here it loses its
        caught-up time, as an epoch bump's reset would give it, so it does not hold the HW back as a
        replica "about to join" until ``replica.lag.time.max.ms`` passes."""
        removed = [r for r in self.isr if r not in state.isr and r != self.local_broker_id]
        self._update_assignment_and_isr(state.replicas, state.isr)
        for broker_id in removed:
            replica = self.remote_replicas.get(broker_id)
            if replica is not None:
                replica.last_caught_up_time_ms = 0
        self.partition_epoch = state.partition_epoch
        self.controller_epoch = state.controller_epoch
        return self.is_leader and self.maybe_increment_leader_hw()

    def _update_assignment_and_isr(self, replicas: Sequence[int], isr: Sequence[int]) -> None:
        self.assigned_replicas = list(replicas)
        self.isr = list(isr)
        self.pending_isr = None
        remotes = [r for r in replicas if r != self.local_broker_id]
        self.remote_replicas = {r: self.remote_replicas.get(r) or ReplicaState(r) for r in remotes}

    # ------------------------------------------------------------------ epoch validation

    def check_current_leader_epoch(self, current_leader_epoch: int) -> Errors:
        """FENCED_LEADER_EPOCH if the caller is behind, UNKNOWN_LEADER_EPOCH if ahead (-1: no check)."""
        if current_leader_epoch == NO_PARTITION_LEADER_EPOCH:
            return Errors.NONE
        if self.leader_epoch > current_leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if self.leader_epoch < current_leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        return Errors.NONE

    def check_local_log(self, current_leader_epoch: int, require_leader: bool) -> None:
        """Kafka's ``getLocalLog``: epoch first, then leadership."""
        error = self.check_current_leader_epoch(current_leader_epoch)
        if error != Errors.NONE:
            raise KafkaError(
                error,
                f"{self.tp[0]}-{self.tp[1]}: request leader epoch {current_leader_epoch}, "
                f"broker {self.local_broker_id} has leader epoch {self.leader_epoch}",
            )
        if require_leader and not self.is_leader:
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.local_broker_id} is not the leader of {self.tp[0]}-{self.tp[1]} "
                f"(leader is {self.leader_id})",
            )

    def last_offset_for_leader_epoch(
        self, current_leader_epoch: int, leader_epoch: int, fetch_only_from_leader: bool
    ) -> tuple[Errors, int, int]:
        """Kafka's ``lastOffsetForLeaderEpoch``: (error, epoch, end offset) for OFFSET_FOR_LEADER_EPOCH.

        In ``leader-epoch-pre-kip-279`` mode the answer is Kafka 1.1's: an offset with no epoch
        (``LeaderEpochFileCache.end_offset_for_pre_kip_279``)."""
        try:
            self.check_local_log(current_leader_epoch, fetch_only_from_leader)
        except KafkaError as exc:
            return exc.error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self.truncation_mode is TruncationMode.LEADER_EPOCH_PRE_KIP_279:
            end = self.log.leader_epoch_cache.end_offset_for_pre_kip_279(leader_epoch, self.log_end_offset)
            return Errors.NONE, UNDEFINED_EPOCH, end
        epoch, offset = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log.log_end_offset)
        if offset == UNDEFINED_EPOCH_OFFSET:
            return Errors.NONE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return Errors.NONE, epoch, offset

    def fetch_offset_for_timestamp(
        self,
        timestamp: int,
        current_leader_epoch: int,
        *,
        client_request: bool,
        fetch_only_from_leader: bool,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> TimestampAndOffset:
        """Kafka's ``fetchOffsetForTimestamp``. Latest (-1) is the HW for a client (the last offset it may
        read), the LEO for a broker or the debug replica id; earliest (-2) is the log start offset; a
        timestamp >= 0 is the first record whose timestamp is >= it, found with the time index, with its
        batch's leader epoch, and -3 the first record with the largest timestamp (Kafka's MAX_TIMESTAMP).
        For a client only an offset below the HW is answered; none is ``(-1, -1, -1)``. Epoch and leadership
        are checked first (``fetch_only_from_leader`` False: any replica answers). At read_committed a
        client's last fetchable offset is the LSO instead of the HW."""
        self.check_local_log(current_leader_epoch, require_leader=fetch_only_from_leader)
        fetchable = self.last_stable_offset if isolation_level == READ_COMMITTED else self._high_watermark
        cache = self.log.leader_epoch_cache
        if timestamp == EARLIEST_TIMESTAMP:
            offset = self.log_start_offset
            epoch = cache.epoch_for_offset(offset)
            return TimestampAndOffset(NO_TIMESTAMP, offset, UNDEFINED_EPOCH if epoch is None else epoch)
        if timestamp == LATEST_TIMESTAMP:
            offset = fetchable if client_request else self.log_end_offset
            if self.is_leader:
                epoch = self.leader_epoch
            else:
                latest = cache.latest_epoch()
                epoch = UNDEFINED_EPOCH if latest is None else latest
            return TimestampAndOffset(NO_TIMESTAMP, offset, epoch)
        if timestamp >= 0 or timestamp == MAX_TIMESTAMP:
            found = self.log.fetch_offset_by_timestamp(timestamp)
            if found is None or (client_request and found[1] >= fetchable):
                return TimestampAndOffset(NO_TIMESTAMP, -1, UNDEFINED_EPOCH)
            return TimestampAndOffset(*found)
        raise KafkaError(
            Errors.UNSUPPORTED_VERSION,
            f"timestamp {timestamp}: only timestamps >= 0, -1 (latest), -2 (earliest) and -3 (the largest "
            "timestamp) are supported",
        )

    # ------------------------------------------------------------------ leader: produce

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest transaction not decided (or decided by a marker not
        yet below the HW) when it is below the high watermark, else the high watermark."""
        return self.log.last_stable_offset(self._high_watermark)

    def maybe_start_transaction_verification(
        self, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """KIP-890 (Kafka's ``Partition.maybeStartTransactionVerification``): the guard the append must
        carry once the coordinator confirmed (``SENTINEL``: the producer's transaction is open here)."""
        if not self.is_leader:
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.local_broker_id} is not the leader of {self.tp[0]}-{self.tp[1]}",
            )
        return self.log.maybe_start_transaction_verification(producer_id, sequence, epoch)

    def append_records_to_leader(
        self,
        records: bytes,
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        if not self.is_leader:
            raise KafkaError(
                Errors.NOT_LEADER_OR_FOLLOWER,
                f"broker {self.local_broker_id} is not the leader of {self.tp[0]}-{self.tp[1]}",
            )
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise KafkaError(
                Errors.NOT_ENOUGH_REPLICAS,
                f"{self.tp[0]}-{self.tp[1]}: ISR {sorted(self.isr)} is smaller than min.insync.replicas="
                f"{self.min_insync_replicas}",
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin, verification_guard)
        self.maybe_increment_leader_hw()
        return info

    def check_enough_replicas_reached(self, required_offset: int) -> tuple[bool, Errors]:
        """For a delayed acks=-1 produce: has the HW passed ``required_offset`` (Kafka's rules)?"""
        if not self.is_leader:
            return False, Errors.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark >= required_offset:
            if len(self.isr) >= self.min_insync_replicas:
                return True, Errors.NONE
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, Errors.NONE

    # ------------------------------------------------------------------ leader: HW and ISR

    def _is_isr_eligible(self, broker_id: int) -> bool:
        return broker_id in self.assigned_replicas and (
            self.is_broker_eligible is None or self.is_broker_eligible(broker_id)
        )

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR plus the replicas a pending proposal adds (a pending shrink still counts the
        replicas it removes): what the HW is computed over (Kafka's PendingExpandIsr / PendingShrinkIsr)."""
        if self.pending_isr is None:
            return self.isr
        return [*self.isr, *(r for r in self.pending_isr if r not in self.isr)]

    def maybe_increment_leader_hw(self) -> bool:
        """HW = the smallest LEO over the maximal ISR (and over caught-up replicas about to join it); it never
        goes down, and it does not move while the ISR is below ``min.insync.replicas`` (KIP-966)."""
        new_hw = self._leader_hw_rule()
        if new_hw > self._high_watermark:
            self._high_watermark = new_hw
            return True
        return False

    def _leader_hw_rule(self) -> int:
        """What Kafka's ``maybeIncrementLeaderHW`` would make the HW now (the HW itself when it may not move).

        The rule depends on the clock: a replica outside the maximal ISR holds the HW back while it is caught
        up (it fetched the leader's LEO within ``replica.lag.time.max.ms``) and may join, and stops holding it
        when that time has passed, with no fetch or produce to say so. So every path that looks at a
        leader's fetch asks this rule (the quiet check too), and so does the isr-expiration task."""
        if not self.is_leader or self.is_under_min_isr:
            return self._high_watermark
        now = self.clock_ms()
        leader_end = self.log.log_end_offset
        new_hw = leader_end
        isr = self.maximal_isr
        for replica in self.remote_replicas.values():
            if replica.log_end_offset < new_hw and (
                replica.broker_id in isr
                or (
                    replica.is_caught_up(leader_end, now, self.replica_lag_time_max_ms)
                    and self._is_isr_eligible(replica.broker_id)
                )
            ):
                new_hw = replica.log_end_offset
        return new_hw

    def update_follower_fetch_state(
        self,
        follower_id: int,
        fetch_offset: int,
        follower_start_offset: int,
        fetch_time_ms: int,
        leader_end: int,
    ) -> tuple[bool, IsrChange | None]:
        """Records a follower fetch; returns (HW moved, ISR expansion if the follower joined)."""
        replica = self.remote_replicas.get(follower_id)
        if replica is None:
            return False, None
        replica.update_fetch_state(fetch_offset, follower_start_offset, fetch_time_ms, leader_end)
        change = self.maybe_expand_isr(follower_id)
        hw_moved = self.maybe_increment_leader_hw()
        return hw_moved, change

    def record_quiet_follower_fetch(
        self,
        follower_id: int,
        fetch_offset: int,
        current_leader_epoch: int,
        high_watermark_sent: int,
        log_start_offset_sent: int,
        follower_start_offset: int,
        fetch_time_ms: int,
    ) -> bool:
        """A follower's incremental fetch session names this partition; if there is nothing to read or
        report (this broker leads in the epoch named, the follower in the ISR has fetched at the leader's LEO,
        the HW and log start offset are the ones last sent to it, and the HW rule would not move the HW
        now), record its fetch (only its fetch times change) and return True; else change nothing and return
        False (read it the usual way, which moves the HW and reports it)."""
        if self.leader_id != self.local_broker_id or current_leader_epoch not in (-1, self.leader_epoch):
            return False
        log_ = self.log
        leo = log_.log_end_offset
        replica = self.remote_replicas.get(follower_id)
        if (
            replica is None
            or fetch_offset != leo
            or replica.log_end_offset != leo
            or high_watermark_sent != self._high_watermark
            or log_start_offset_sent != log_.log_start_offset
            or follower_start_offset != replica.log_start_offset
            or follower_id not in self.isr
            # A HW below the LEO may be due to move with nothing new from this follower (a replica outside
            # the ISR stopped being caught up): the usual path moves it and reports it. At the LEO (an idle
            # partition) it cannot move.
            or (self._high_watermark != leo and self._leader_hw_rule() > self._high_watermark)
        ):
            return False
        # Kafka's Replica.updateFetchState for a follower at the leader's LEO.
        if fetch_time_ms > replica.last_caught_up_time_ms:
            replica.last_caught_up_time_ms = fetch_time_ms
        replica.last_fetch_leader_log_end_offset = leo
        replica.last_fetch_time_ms = fetch_time_ms
        return True

    def is_follower_in_sync_for_expansion(self, follower_id: int) -> bool:
        replica = self.remote_replicas.get(follower_id)
        if replica is None or self.leader_epoch_start_offset is None:
            return False
        return (
            replica.log_end_offset >= self._high_watermark
            and replica.log_end_offset >= self.leader_epoch_start_offset
        )

    def maybe_expand_isr(self, follower_id: int) -> IsrChange | None:
        """A follower outside the ISR joins once it has reached the HW and the start of this leader's
        epoch (Kafka's ``maybeExpandIsr``)."""
        if not self.is_leader or follower_id in self.isr or not self._is_isr_eligible(follower_id):
            return None
        if not self.is_follower_in_sync_for_expansion(follower_id):
            return None
        old = list(self.isr)
        if self._propose([*old, follower_id], "follower_caught_up"):
            return None
        self.isr = [*old, follower_id]
        return IsrChange(old, list(self.isr), "follower_caught_up")

    def _propose(self, new_isr: list[int], reason: str) -> bool:
        """Managed mode: send the proposal (at most one in flight) and return True; unmanaged: False."""
        if self.isr_proposer is None:
            return False
        if self.pending_isr is None and self.isr_proposer(self, new_isr, reason):
            self.pending_isr = new_isr
        return True

    def out_of_sync_replicas(self, now_ms: int) -> dict[int, int]:
        """Followers in the ISR that have not caught up for ``replica.lag.time.max.ms``: id -> lag ms."""
        leader_end = self.log.log_end_offset
        out: dict[int, int] = {}
        for broker_id in self.isr:
            if broker_id == self.local_broker_id:
                continue
            replica = self.remote_replicas.get(broker_id)
            if replica is None:
                continue
            if not replica.is_caught_up(leader_end, now_ms, self.replica_lag_time_max_ms):
                out[broker_id] = now_ms - replica.last_caught_up_time_ms
        return out

    def maybe_shrink_isr(self) -> IsrChange | None:
        """Kafka's ``maybeShrinkIsr``: drop followers that fell behind, then maybe move the HW.

        The HW rule is asked first in any case: the passing of time alone may let the HW move (a replica
        outside the ISR that held it back is no longer caught up), and a leader whose followers all stopped
        fetching has no other event to ask it (Kafka waits for the next produce or follower fetch)."""
        if not self.is_leader:
            return None
        self.maybe_increment_leader_hw()
        lagging = self.out_of_sync_replicas(self.clock_ms())
        if not lagging:
            return None
        old = list(self.isr)
        if self._propose([b for b in old if b not in lagging], "follower_lagging"):
            return None
        self.isr = [b for b in old if b not in lagging]
        self.maybe_increment_leader_hw()
        return IsrChange(old, list(self.isr), "follower_lagging", lagging)

    def set_isr(self, isr: Sequence[int], partition_epoch: int) -> bool:
        """The controller committed an ISR (ALTER_PARTITION); returns True if the HW moved."""
        self.isr = list(isr)
        self.pending_isr = None
        self.partition_epoch = partition_epoch
        return self.maybe_increment_leader_hw()

    # ------------------------------------------------------------------ reads

    def read_records(
        self,
        fetch_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        *,
        from_follower: bool,
        fetch_only_from_leader: bool = True,
        min_one_message: bool = True,
        last_fetched_epoch: int = NO_PARTITION_LEADER_EPOCH,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> LogReadResult:
        """Kafka's ``Partition.fetchRecords``/``readRecords``. With ``last_fetched_epoch`` (>= 0) the
        fetcher's last epoch is checked first (KIP-595's divergence, for any fetcher of Fetch v12+): where
        this log's epoch at or below it ends before the fetch offset, or is an older epoch, nothing is read
        and the answer is that epoch and its end offset (``diverging_epoch``), for the fetcher to truncate
        to."""
        self.check_local_log(current_leader_epoch, fetch_only_from_leader)
        leo = self.log.log_end_offset
        lso = self.log.log_start_offset
        if last_fetched_epoch >= 0:
            error, epoch, end = self.last_offset_for_leader_epoch(
                current_leader_epoch, last_fetched_epoch, fetch_only_from_leader=False
            )
            if error != Errors.NONE:
                raise KafkaError(error, f"{self.tp[0]}-{self.tp[1]}: last fetched epoch {last_fetched_epoch}")
            if end == UNDEFINED_EPOCH_OFFSET or epoch == UNDEFINED_EPOCH:
                raise OffsetOutOfRangeError(
                    f"{self.tp[0]}-{self.tp[1]}: could not determine the end offset of the last fetched "
                    f"epoch {last_fetched_epoch} on broker {self.local_broker_id}"
                )
            if fetch_offset < lso:
                raise OffsetOutOfRangeError(
                    f"{self.tp[0]}-{self.tp[1]}: fetch offset {fetch_offset} is below the log start offset "
                    f"{lso} on broker {self.local_broker_id}"
                )
            if epoch < last_fetched_epoch or end < fetch_offset:
                return LogReadResult(b"", self._high_watermark, lso, leo, (epoch, end))
        if fetch_offset < lso or fetch_offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.tp[0]}-{self.tp[1]}: fetch offset {fetch_offset} is outside the log "
                f"[{lso}, {leo}] on broker {self.local_broker_id}"
            )
        read_committed = not from_follower and isolation_level == READ_COMMITTED
        last_stable = self.last_stable_offset
        max_offset: int | None = None  # a follower reads to the log end
        if not from_follower:
            max_offset = last_stable if read_committed else self._high_watermark
        if max_offset is not None and fetch_offset >= max_offset:
            data = b""
        else:
            data = self.log.read(
                fetch_offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message
            )
        aborted = None
        if read_committed:
            # Kafka's addAbortedTransactions: those overlapping [fetch offset, the offset after the data).
            aborted = []
            if data:
                upper = _next_offset_after(data)
                aborted = self.log.collect_aborted_transactions(fetch_offset, upper)
        return LogReadResult(
            data, self._high_watermark, lso, leo, last_stable_offset=last_stable, aborted_transactions=aborted
        )

    # ------------------------------------------------------------------ follower side

    def append_records_to_follower(self, records: bytes) -> LogAppendInfo:
        return self.log.append_as_follower(records)

    def update_follower_high_watermark(self, leader_hw: int) -> int:
        """A follower takes the leader's HW, clamped to its own [log start, LEO]."""
        self._high_watermark = max(self.log.log_start_offset, min(leader_hw, self.log.log_end_offset))
        return self._high_watermark

    def truncate_to(self, offset: int) -> bool:
        truncated = self.log.truncate_to(offset)
        if self._high_watermark > self.log.log_end_offset:
            self._high_watermark = self.log.log_end_offset
        return truncated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self._high_watermark = offset

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Move the log start up to ``new_start``. A leader moves it only up to its HW (Kafka's
        ``UnifiedLog.maybeIncrementLogStartOffset``): past it, records no follower may have yet would be
        gone, and the HW would follow the log start past the LEO of replicas in the ISR. A follower follows
        its leader's log start and takes its HW along."""
        if self.is_leader and new_start > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.tp[0]}-{self.tp[1]} to {new_start}: beyond the high "
                f"watermark {self._high_watermark}"
            )
        changed = self.log.maybe_increment_log_start_offset(new_start)
        if self._high_watermark < self.log.log_start_offset:
            self._high_watermark = self.log.log_start_offset
        return changed


def _next_offset_after(data: bytes) -> int:
    """The offset after the last of the whole batches in ``data``."""
    pos, next_offset = 0, -1
    while pos + BATCH_HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        next_offset = header.next_offset
        pos += header.size
    return next_offset
