"""A stateful property test of the leader side of a partition: the high watermark, the ISR and the fetch
sessions of its followers, driven through ``KafkaApis`` and the ``ReplicaManager`` over a real log on a
``MockTime`` clock (no sockets).

Broker 0 leads ``t-0`` with replicas [0, 1, 2]. Hypothesis picks the steps: appends (acks 1 or all),
follower fetches at any offset (named in an incremental round, a quiet round that names nothing, a full
fetch that opens a new session, or a long poll that parks), ISR proposals (AlterPartition, managed mode)
that the controller commits, refuses or leaves pending, the isr-expiration task, min.insync.replicas from 1
to 3, new leader epochs with any ISR, and log start moves. Time passes only inside a step that is an event
for the leader (a produce, a fetch, the expiration task), as it does on a broker, where followers in the
ISR fetch at least every replica.fetch.wait.max.ms and the expiration task runs every
replica.lag.time.max.ms / 2.

After every step, Kafka's rules for the high watermark (``Partition.scala``: ``maybeIncrementLeaderHW``,
``updateFollowerFetchState``, the maximal ISR of KIP-497), docs/replication.md:

1. the HW never decreases within a leader epoch;
2. the HW never passes the LEO of a member of the maximal ISR: a step that moves it leaves it at or below
   the LEO of the leader and of every replica in the committed ISR or a pending proposal;
3. the HW never waits: when the committed ISR holds at least min.insync.replicas members, the HW is at
   least the smallest LEO over the leader, the maximal ISR and the replicas Kafka waits for before they
   join (caught up within replica.lag.time.max.ms and eligible), so an offset X that all of them reached
   is below the HW without another produce or fetch;
4. an acks=all produce whose offset is below the HW has been answered;
5. a follower that finished a fetch round knows the current HW: an incremental response leaves out only
   partitions whose HW the session already sent (KIP-227), quiet or not.

``HW_MODEL_EXAMPLES`` runs more examples (``make test`` runs a fixed, derandomized set).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.partition import LeaderAndIsrState, Partition
from broker.replica_manager import AlterCallback
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.common import TopicPartition
from protocol.errors import Errors, OffsetOutOfRangeError
from protocol.records import iter_batches
from server.request_channel import Request

from .broker_support import (
    LAG_MS,
    LOCAL,
    TP,
    Broker,
    batch,
    endpoint,
    make_request,
    produce_request,
    response,
)

FOLLOWERS = (1, 2)
REPLICAS = [LOCAL, *FOLLOWERS]
MAX_WAIT_MS = 500
# How long a step may let pass before its event: nothing, a little, half the lag (the expiration task's
# period) and more than replica.lag.time.max.ms (a replica falls out of sync, or stops being waited for).
STEPS_MS = st.sampled_from([0, 1, LAG_MS // 2, LAG_MS + 1])


def run_now(coro: Coroutine[Any, Any, None]) -> None:
    """Runs a ``KafkaApis.handle`` coroutine, which never awaits for PRODUCE and FETCH, to its end."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise AssertionError("the handler awaited")


@dataclass
class Proposal:
    """An ALTER_PARTITION proposal the model's controller holds."""

    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    callback: AlterCallback


@dataclass
class Follower:
    """What a follower knows, as its fetcher would: its session and the HW it was last sent."""

    broker_id: int
    session_id: int = 0
    session_epoch: int = 0
    leader_epoch: int = 1
    # The partition must be named in the next incremental round (a new epoch or offset to tell).
    must_name: bool = True
    fetch_offset: int = 0
    log_start_offset: int = 0
    known_hw: int = -1
    parked: Request | None = None
    # The fetch offset the leader accepted last (its view of this follower's LEO), -1: none in this epoch.
    accepted_offset: int = -1


@dataclass
class Controller:
    """The partition's state at the model's controller (managed mode) and the proposal in flight."""

    leader_epoch: int = 1
    isr: list[int] = field(default_factory=lambda: list(REPLICAS))
    partition_epoch: int = 0
    in_flight: list[tuple[TopicPartition, Proposal]] = field(default_factory=list)


# Rules an example may leave out (swarm testing): an example that runs fewer kinds of step runs each of the
# others more often, and so reaches the longer sequences of a few kinds that a bug may need.
OPTIONAL = ("follower_moves", "isr_expiration", "new_leader_epoch", "min_insync_replicas", "log_start_moves")


def enabled(name: str) -> Any:
    return precondition(lambda self: self.broker is not None and name in self.enabled)


class LeaderHighWatermarkMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # In memory where the machine has it: a step's leader-epoch checkpoints are fsynced, which costs
        # milliseconds on a disk and nothing on tmpfs, and durability is not what this test is about.
        shm = Path("/dev/shm")
        self.tmp = Path(tempfile.mkdtemp(prefix="hw-model-", dir=shm if shm.is_dir() else None))
        self.broker: Broker | None = None
        self.followers = {f: Follower(f) for f in FOLLOWERS}
        self.controller = Controller()
        self.managed = False
        self.produces: list[tuple[Request, int]] = []
        self.hw_seen = (0, 0)  # (leader epoch, HW) after the last step
        # The clock at the last event that asks the HW rule. An expiring long poll is none: it answers
        # without recording a fetch (as in Kafka), and the follower's next round, right after, asks it.
        self.event_ms = 0
        self.enabled: frozenset[str] = frozenset(OPTIONAL)

    # ------------------------------------------------------------------ set-up

    @initialize(
        managed=st.booleans(),
        min_isr=st.integers(1, 3),
        others=st.lists(st.sampled_from(FOLLOWERS), unique=True),
        rules=st.frozensets(st.sampled_from(OPTIONAL)),
    )
    def start(
        self, managed: bool, min_isr: int, others: list[int], rules: frozenset[str] = frozenset(OPTIONAL)
    ) -> None:
        self.enabled = rules
        self.broker = Broker(self.tmp, min_isr=min_isr)
        self.managed = managed
        if managed:
            self.broker.rm.enable_alter_partition(self._submit)
        self._leader_and_isr([LOCAL, *others])

    def teardown(self) -> None:
        if self.broker is not None:
            self.broker.log_manager.shutdown(self.broker.rm.high_watermarks())
            self.broker.journal.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @property
    def b(self) -> Broker:
        assert self.broker is not None
        return self.broker

    @property
    def p(self) -> Partition:
        return self.b.rm.partitions[TP]

    def _submit(
        self, tp: TopicPartition, leader_epoch: int, isr: list[int], partition_epoch: int, cb: AlterCallback
    ) -> bool:
        # As AlterPartitionManager.submit: at most one proposal per partition in flight.
        if self.controller.in_flight:
            return False
        self.controller.in_flight.append((tp, Proposal(leader_epoch, list(isr), partition_epoch, cb)))
        return True

    def _leader_and_isr(self, isr: list[int]) -> None:
        c = self.controller
        state = LeaderAndIsrState(LOCAL, c.leader_epoch, isr, REPLICAS, partition_epoch=c.partition_epoch)
        c.isr = list(isr)
        live = [endpoint(f) for f in FOLLOWERS]
        _, errors = self.b.rm.become_leader_or_follower(1, 1, [(TP, state)], live)
        assert errors == {TP: Errors.NONE}
        self.hw_seen = (c.leader_epoch, self.p.high_watermark)
        self.event_ms = self.b.clock()

    # ------------------------------------------------------------------ produce

    @rule(acks=st.sampled_from([1, -1]), count=st.integers(1, 3), wait_ms=STEPS_MS)
    def produce(self, acks: int, count: int, wait_ms: int) -> None:
        self.b.clock.sleep(wait_ms)
        self.event_ms = self.b.clock()
        under_min_isr = len(self.p.isr) < self.p.min_insync_replicas
        request = make_request(ApiKeys.PRODUCE, produce_request(acks, batch(count), timeout_ms=10**9))
        run_now(self.b.apis.handle(request))
        if acks == 1:
            assert request.done
            return
        if under_min_isr:
            assert request.done
            body = response(request, m.ProduceResponse)
            assert body.responses[0].partition_responses[0].error_code == Errors.NOT_ENOUGH_REPLICAS
            return
        self.produces.append((request, self.p.log_end_offset))

    # ------------------------------------------------------------------ follower fetches

    def _fetch_request(self, f: Follower, *, named: bool, full: bool, max_wait_ms: int) -> m.FetchRequest:
        partitions = []
        if named or full:
            partitions = [
                m.FetchRequestTopic(
                    topic=TP[0],
                    partitions=[
                        m.FetchRequestPartition(
                            partition=TP[1],
                            current_leader_epoch=f.leader_epoch,
                            fetch_offset=f.fetch_offset,
                            log_start_offset=f.log_start_offset,
                            partition_max_bytes=1 << 20,
                        )
                    ],
                )
            ]
        return m.FetchRequest(
            replica_id=f.broker_id,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            session_id=0 if full else f.session_id,
            session_epoch=0 if full else f.session_epoch,
            topics=partitions,
        )

    @enabled("follower_moves")
    @rule(data=st.data(), follower=st.sampled_from(FOLLOWERS))
    def follower_moves(self, data: st.DataObject, follower: int) -> None:
        """The follower's next fetch is at any offset: it truncated, restarted from a checkpoint, or is out
        of range (below the log start or past the LEO)."""
        self._move(data, self.followers[follower])

    def _move(self, data: st.DataObject, f: Follower) -> None:
        if f.parked is not None:
            return
        p = self.p
        low, high = p.log_start_offset, p.log_end_offset
        offset = data.draw(
            st.one_of(
                st.sampled_from([p.high_watermark, low, max(low, high - 1), high]),
                st.integers(low, high),
                st.sampled_from([high + 1, low - 1]).filter(lambda o: o >= 0),
            ),
            label="fetch offset",
        )
        f.log_start_offset = data.draw(st.integers(0, max(0, offset)), label="follower log start")
        if offset != f.fetch_offset:
            f.fetch_offset = offset
            f.must_name = True

    @precondition(lambda self: self.broker is not None)
    @rule(
        data=st.data(),
        follower=st.sampled_from(FOLLOWERS),
        kind=st.sampled_from(["round", "round", "full", "long-poll"]),
        jump=st.sampled_from([False, False, True]),
        rounds=st.integers(1, 3),
        wait_ms=STEPS_MS,
    )
    def fetch(
        self,
        follower: int,
        kind: str,
        rounds: int,
        wait_ms: int,
        jump: bool = False,
        data: st.DataObject | None = None,
    ) -> None:
        """Fetch rounds as a follower's fetcher sends them, one after another (the first of the kind drawn,
        the others incremental; the wait comes before the last): incremental, naming the partition only
        when its fetch offset or epoch changed (a quiet round otherwise), or a full fetch that opens a new
        session, or a long poll that parks when there is nothing to send. With ``jump`` the first round
        is at any offset (``follower_moves``), which reaches the leader's LEO, and so a caught-up follower,
        in fewer steps."""
        f = self.followers[follower]
        if jump and data is not None:
            self._move(data, f)
        for i in range(rounds):
            if f.parked is not None:
                return
            if i == rounds - 1:
                self.b.clock.sleep(wait_ms)
            sent_ms = self.b.clock()
            full = (kind == "full" and i == 0) or f.session_id == 0
            long_poll = kind == "long-poll" and i == rounds - 1
            request = make_request(
                ApiKeys.FETCH,
                self._fetch_request(
                    f, named=f.must_name, full=full, max_wait_ms=MAX_WAIT_MS if long_poll else 0
                ),
            )
            run_now(self.b.apis.handle(request))
            if full:
                f.session_epoch = 0
            if not request.done:
                # Parked: the leader recorded the fetch (an error would have been answered at once).
                f.parked = request
                f.accepted_offset = f.fetch_offset
                self.event_ms = sent_ms
                return
            if self._answered(f, request):
                # A fetch the leader took is an event that asks the HW rule; one it refused (out of range,
                # fenced epoch, unknown session) changes nothing of the partition, in Kafka too.
                self.event_ms = sent_ms

    def _answered(self, f: Follower, request: Request) -> bool:
        """The follower reads a fetch response: its session, the HW, what the leader accepted. True if the
        leader took the fetch of the partition (no error for it)."""
        f.parked = None
        body = response(request, m.FetchResponse)
        if body.error_code != Errors.NONE:
            f.session_id, f.session_epoch, f.must_name = 0, 0, True
            return False
        if f.session_id != body.session_id:
            f.session_id = body.session_id
            f.session_epoch = 0
        f.session_epoch += 1
        f.must_name = False
        got = {(t.topic, p.partition_index): p for t in body.responses for p in t.partitions}
        part = got.get(TP)
        if part is not None:
            if part.error_code != Errors.NONE:
                f.known_hw = -1
                f.must_name = True
                if part.error_code == Errors.FENCED_LEADER_EPOCH:
                    # LEADER_AND_ISR tells a follower of the new epoch; it may come after a fetch in the old.
                    f.leader_epoch = self.p.leader_epoch
                return False
            f.known_hw = part.high_watermark
        f.accepted_offset = f.fetch_offset
        if part is not None and part.records:
            # The follower appends what it got: its next fetch is after the last batch.
            f.fetch_offset = max(h.last_offset for _, h in iter_batches(part.records)) + 1
            f.must_name = True
        # 5: the follower knows the HW after each round, whatever the round left out.
        assert f.known_hw == self.p.high_watermark, (
            f"follower {f.broker_id} believes HW {f.known_hw}, leader HW {self.p.high_watermark}"
        )
        return True

    @precondition(lambda self: self.broker is not None and self.managed)
    @rule(follower=st.sampled_from(FOLLOWERS))
    def fenced_replica_catches_up(self, follower: int) -> None:
        """A replica outside the ISR whose broker the controller has fenced (after an isolation, say)
        fetches up to the leader's LEO; the leader proposes it for the ISR and the controller refuses
        (INELIGIBLE_REPLICA). Caught up, it holds the HW at its LEO until replica.lag.time.max.ms passes."""
        f = self.followers[follower]
        if f.parked is not None or follower in self.p.isr:
            return
        self.fetch(follower, "round", 3, 0)
        if self.controller.in_flight:
            self.controller_answers(Errors.INELIGIBLE_REPLICA)

    @precondition(lambda self: any(f.parked is not None for f in self.followers.values()))
    @rule()
    def long_polls_expire(self) -> None:
        self.b.clock.sleep(MAX_WAIT_MS)
        self.b.fetch_purgatory._expire_due()
        self._collect_parked()

    def _collect_parked(self) -> None:
        for f in self.followers.values():
            if f.parked is not None and f.parked.done:
                self._answered(f, f.parked)

    @precondition(
        lambda self: (
            self.broker is not None
            and any(f.leader_epoch != self.p.leader_epoch for f in self.followers.values())
        )
    )
    @rule(follower=st.sampled_from(FOLLOWERS))
    def follower_learns_the_leader_epoch(self, follower: int) -> None:
        f = self.followers[follower]
        if f.leader_epoch != self.p.leader_epoch:
            f.leader_epoch = self.p.leader_epoch
            f.must_name = True

    # ------------------------------------------------------------------ the ISR

    @enabled("isr_expiration")
    @rule(wait_ms=STEPS_MS)
    def isr_expiration(self, wait_ms: int) -> None:
        self.b.clock.sleep(wait_ms)
        self.event_ms = self.b.clock()
        self.b.rm.maybe_shrink_isr()

    @precondition(lambda self: bool(self.controller.in_flight))
    @rule(
        outcome=st.sampled_from(
            [
                Errors.NONE,
                Errors.INVALID_UPDATE_VERSION,
                Errors.INELIGIBLE_REPLICA,
                Errors.FENCED_LEADER_EPOCH,
            ]
        )
    )
    def controller_answers(self, outcome: Errors) -> None:
        """The controller commits the proposal (if it is for its state) or refuses it."""
        c = self.controller
        tp, proposal = c.in_flight.pop(0)
        self.event_ms = self.b.clock()
        if outcome == Errors.NONE:
            if proposal.leader_epoch != c.leader_epoch:
                outcome = Errors.FENCED_LEADER_EPOCH
            elif proposal.partition_epoch != c.partition_epoch:
                outcome = Errors.INVALID_UPDATE_VERSION
            else:
                c.isr = list(proposal.isr)
                c.partition_epoch += 1
        proposal.callback(tp, outcome, c.leader_epoch, list(c.isr), c.partition_epoch)
        self._collect_parked()

    @enabled("new_leader_epoch")
    @rule(others=st.lists(st.sampled_from(FOLLOWERS), unique=True))
    def new_leader_epoch(self, others: list[int]) -> None:
        """The controller re-elects this leader in a new epoch with any ISR (a controlled shutdown of a
        follower, a reassignment, an ISR the controller changed)."""
        self.controller.leader_epoch += 1
        self.controller.partition_epoch += 1
        self._leader_and_isr([LOCAL, *others])
        self._collect_parked()

    @enabled("min_insync_replicas")
    @rule(value=st.integers(1, 3))
    def min_insync_replicas(self, value: int) -> None:
        self.b.rm.apply_topic_configs(TP[0], {"min.insync.replicas": str(value)})
        self.event_ms = self.b.clock()
        self._collect_parked()

    # ------------------------------------------------------------------ log start

    @enabled("log_start_moves")
    @rule(data=st.data())
    def log_start_moves(self, data: st.DataObject) -> None:
        """DeleteRecords or retention on the leader: Kafka moves the log start only up to the HW."""
        p = self.p
        target = data.draw(st.integers(p.log_start_offset, p.log_end_offset), label="new log start")
        if target > p.high_watermark:
            try:
                p.maybe_increment_log_start_offset(target)
            except OffsetOutOfRangeError:
                return
            raise AssertionError(f"log start moved to {target} past the HW {p.high_watermark}")
        p.maybe_increment_log_start_offset(target)

    # ------------------------------------------------------------------ invariants

    def _waited_for(self) -> dict[int, int]:
        """Replica -> LEO of every replica Kafka's rule waits for: the leader, the maximal ISR, and a
        replica outside it that is caught up and eligible (``shouldWaitForReplicaToJoinIsr``), as of the
        last event."""
        p = self.p
        out = {LOCAL: p.log_end_offset}
        maximal = p.maximal_isr
        for broker_id, replica in p.remote_replicas.items():
            if broker_id in maximal or (
                broker_id in p.assigned_replicas
                and replica.is_caught_up(p.log_end_offset, self.event_ms, p.replica_lag_time_max_ms)
            ):
                out[broker_id] = replica.log_end_offset
        return out

    @invariant()
    def high_watermark_rules(self) -> None:
        if self.broker is None:
            return
        self._collect_parked()
        p = self.p
        assert p.is_leader
        epoch, before = self.hw_seen
        hw = p.high_watermark
        # 1
        if epoch == p.leader_epoch:
            assert hw >= before, f"HW went down from {before} to {hw} in leader epoch {epoch}"
        # The leader's view of each follower is the last fetch offset it accepted.
        for f in self.followers.values():
            if f.accepted_offset >= 0:
                assert p.remote_replicas[f.broker_id].log_end_offset == f.accepted_offset
        # 2
        if hw > before:
            for broker_id in [LOCAL, *p.maximal_isr]:
                leo = p.log_end_offset if broker_id == LOCAL else p.remote_replicas[broker_id].log_end_offset
                assert hw <= leo, f"HW {hw} passed the LEO {leo} of {broker_id} (maximal ISR {p.maximal_isr})"
        # 3
        if len(p.isr) >= p.min_insync_replicas:
            waited = self._waited_for()
            due = min(waited.values())
            assert hw >= due, (
                f"HW {hw} is behind {due}: every replica it waits for has reached it ({waited}, ISR "
                f"{p.isr}, maximal {p.maximal_isr}, min.insync.replicas {p.min_insync_replicas})"
            )
        # 4
        for request, required in self.produces:
            if required <= hw:
                assert request.done, f"an acks=all produce up to {required} still waits with the HW at {hw}"
        self.produces = [(r, o) for r, o in self.produces if not r.done]
        self.hw_seen = (p.leader_epoch, hw)


LeaderHighWatermarkMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HW_MODEL_EXAMPLES", "150")),
    stateful_step_count=int(os.environ.get("HW_MODEL_STEPS", "30")),
    derandomize="HW_MODEL_EXAMPLES" not in os.environ,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLeaderHighWatermark = LeaderHighWatermarkMachine.TestCase


def replay(steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Plays ``steps`` (rule name, arguments) on a new machine, checking the invariants after each."""
    machine = LeaderHighWatermarkMachine()
    try:
        for name, kwargs in steps:
            getattr(machine, name)(**kwargs)
            machine.high_watermark_rules()
    finally:
        machine.teardown()


def test_a_quiet_round_moves_a_hw_that_a_replica_outside_the_isr_held_back() -> None:
    # The interleaving that left the HW below the LEO with every ISR member at the LEO. Replica 2, outside
    # the ISR, catches up and its proposal to join is refused: caught up within replica.lag.time.max.ms,
    # it holds the HW back (Kafka waits for a replica about to join). Replica 1, in the ISR, fetches the
    # next batch and reaches the LEO; the HW stops at 2's LEO. Replica 2 fetches no more. Once the lag time
    # has passed, 2 no longer holds the HW, and the next event must move it: here replica 1's quiet round
    # (nothing new to fetch), which before the fix was answered without asking the HW rule.
    replay(
        [
            ("start", {"managed": True, "min_isr": 1, "others": [1]}),
            ("produce", {"acks": 1, "count": 1, "wait_ms": 0}),
            ("fetch", {"follower": 2, "kind": "round", "rounds": 2, "wait_ms": 0}),
            ("controller_answers", {"outcome": Errors.INELIGIBLE_REPLICA}),
            ("produce", {"acks": -1, "count": 1, "wait_ms": 0}),
            ("fetch", {"follower": 1, "kind": "round", "rounds": 3, "wait_ms": LAG_MS + 1}),
        ]
    )


def test_the_isr_expiration_task_moves_a_hw_that_no_fetch_would() -> None:
    # Found by the machine above: the ISR is the leader alone, replica 1 outside it caught up and was
    # refused; an acks=all write then waits on 1, which fetches no more. When 1 stops being caught up no
    # follower fetches and nothing is produced: only the isr-expiration task, which asks the HW rule, can
    # answer the write.
    replay(
        [
            ("start", {"managed": True, "min_isr": 1, "others": []}),
            ("fetch", {"follower": 1, "kind": "round", "rounds": 1, "wait_ms": 0}),
            ("produce", {"acks": -1, "count": 1, "wait_ms": 0}),
            ("controller_answers", {"outcome": Errors.INVALID_UPDATE_VERSION}),
            ("isr_expiration", {"wait_ms": LAG_MS + 1}),
        ]
    )
