"""A hypothesis state machine drives the controller core with random registrations, heartbeats, clock
jumps, controlled shutdowns, topic changes and ALTER_PARTITION proposals (some stale), and checks
Kafka's safety rules after every step."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from controller.core import Effects
from controller.state import NO_LEADER
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys
from tests.unit.controller.support import SESSION_MS, make_core, registration

BROKERS = st.integers(1, 4)
TOPICS = st.sampled_from(["a", "b", "c"])


class ControllerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.unclean = False
        self.core = make_core(unclean=False)
        self.now = 0
        self.incarnations: dict[int, int] = {}
        self.epochs: dict[tuple[str, int], tuple[int, int]] = {}
        self.before: dict[tuple[str, int], tuple[int, list[int]]] = {}
        self.effects: Effects = Effects()
        self.live_before: set[int] = set()

    # ------------------------------------------------------------------------------------ steps

    @initialize(brokers=st.integers(0, 4), rf=st.integers(1, 3))
    def cluster(self, brokers: int, rf: int) -> None:
        """Most runs start from live brokers and a topic, so short runs reach the interesting states."""
        for b in range(1, brokers + 1):
            self.register(b, False)
            self.heartbeat(b, False)
        self.create_topic("a", 2, rf)

    def _step(self) -> None:
        self.before = {tp: (p.leader, list(p.isr)) for tp, p in self.core.state.all_partitions()}
        self.live_before = self.core.live_brokers()

    def _done(self) -> None:
        self.effects = self.core.drain()

    @rule(b=BROKERS, restart=st.booleans())
    def register(self, b: int, restart: bool) -> None:
        self._step()
        if restart or b not in self.incarnations:
            self.incarnations[b] = self.incarnations.get(b, 0) + 1
        resp = self.core.register_broker(registration(b, f"inc-{b}-{self.incarnations[b]}"), self.now)
        assert resp.error_code == 0
        self._done()

    @rule(b=BROKERS, want_shut_down=st.booleans())
    def heartbeat(self, b: int, want_shut_down: bool) -> None:
        reg = self.core.state.brokers.get(b)
        if reg is None:
            return
        self._step()
        resp = self.core.heartbeat(
            cm.BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.epoch, want_shut_down=want_shut_down),
            self.now,
        )
        assert resp.error_code == 0
        self._done()

    @rule(b=BROKERS)
    def fence(self, b: int) -> None:
        """A broker's session ends while the others keep theirs."""
        reg = self.core.state.brokers.get(b)
        if reg is None:
            return
        self._step()
        resp = self.core.heartbeat(
            cm.BrokerHeartbeatRequest(broker_id=b, broker_epoch=reg.epoch, want_fence=True), self.now
        )
        assert resp.error_code == 0 and resp.is_fenced
        self._done()

    @rule(dt=st.integers(0, 2 * SESSION_MS))
    def time_passes(self, dt: int) -> None:
        self._step()
        self.now += dt
        self.core.tick(self.now)
        self._done()

    @rule(b=BROKERS)
    def controlled_shutdown(self, b: int) -> None:
        reg = self.core.state.brokers.get(b)
        if reg is None:
            return
        self._step()
        resp = self.core.controlled_shutdown(
            cm.ControlledShutdownRequest(broker_id=b, broker_epoch=reg.epoch)
        )
        assert resp.error_code == 0
        for r in resp.remaining_partitions:
            p = self.core.state.partition((r.topic_name, r.partition_index))
            assert p is not None and p.leader == b
        self._done()

    @rule(name=TOPICS, partitions=st.integers(1, 3), rf=st.integers(1, 3))
    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        self._step()
        self.core.create_topics(
            cm.CreateTopicsRequest(
                topics=[
                    cm.CreateTopicsRequestTopic(name=name, num_partitions=partitions, replication_factor=rf)
                ]
            )
        )
        self._done()

    @rule(name=TOPICS)
    def delete_topic(self, name: str) -> None:
        self._step()
        self.core.delete_topics(cm.DeleteTopicsRequest(topic_names=[name]))
        for tp in [tp for tp in self.epochs if tp[0] == name]:
            del self.epochs[tp]
        self._done()

    @rule(data=st.data())
    def alter_partition(self, data: st.DataObject) -> None:
        parts = [(tp, p) for tp, p in self.core.state.all_partitions() if p.leader != NO_LEADER]
        if not parts:
            return
        tp, p = data.draw(st.sampled_from(parts))
        others = [r for r in p.replicas if r != p.leader]
        isr = [p.leader, *data.draw(st.lists(st.sampled_from(others), unique=True))] if others else [p.leader]
        leader_epoch = p.leader_epoch - data.draw(st.sampled_from([0, 0, 0, 1]))
        partition_epoch = p.partition_epoch - data.draw(st.sampled_from([0, 0, 0, 1]))
        reg = self.core.state.brokers[p.leader]
        self._step()
        old = (list(p.isr), p.partition_epoch)
        resp = self.core.alter_partition(
            cm.AlterPartitionRequest(
                broker_id=p.leader,
                broker_epoch=reg.epoch,
                topics=[
                    cm.AlterPartitionRequestTopic(
                        topic_name=tp[0],
                        partitions=[
                            cm.AlterPartitionRequestPartition(
                                partition_index=tp[1],
                                leader_epoch=leader_epoch,
                                new_isr=isr,
                                partition_epoch=partition_epoch,
                            )
                        ],
                    )
                ],
            )
        )
        got = resp.topics[0].partitions[0]
        stale = leader_epoch != p.leader_epoch or partition_epoch != old[1]
        # A stale partition epoch proposing the ISR the partition already has is a retry of a change whose
        # answer was lost: answered with the current state, nothing changed (Kafka's
        # equalsAllowStalePartitionEpoch).
        retry = leader_epoch == p.leader_epoch and sorted(isr) == sorted(old[0])
        if stale:
            assert (got.error_code == 0) == retry and (list(p.isr), p.partition_epoch) == old
            if retry:
                assert (list(got.isr), got.partition_epoch) == old
        if got.error_code == 0:
            assert sorted(p.isr) == sorted(isr)
            assert p.partition_epoch == old[1] + (sorted(isr) != sorted(old[0]))
            assert all(self.core.ineligible_reason(r) is None for r in isr if r != p.leader)
        self._done()

    # ------------------------------------------------------------------------------------ checks

    @invariant()
    def partition_states_are_sane(self) -> None:
        core = self.core
        live = core.live_brokers()
        for tp, p in core.state.all_partitions():
            assert p.isr, f"{tp}: empty ISR"
            assert len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), (tp, p)
            if p.leader != NO_LEADER:
                assert p.leader in p.isr, (tp, p)
                assert p.leader in live, (tp, p, live)
            dead = [r for r in p.isr if r not in live]
            if dead:
                # Only the last ISR member of a leaderless partition may be a broker that is down.
                assert p.leader == NO_LEADER and p.isr == dead and len(dead) == 1, (tp, p, live)

    @invariant()
    def epochs_never_go_back(self) -> None:
        for tp, p in self.core.state.all_partitions():
            old = self.epochs.get(tp)
            if old is not None:
                assert p.leader_epoch >= old[0] and p.partition_epoch >= old[1], (tp, old, p)
            self.epochs[tp] = (p.leader_epoch, p.partition_epoch)

    @invariant()
    def elections_are_clean(self) -> None:
        for tp, p in self.core.state.all_partitions():
            before = self.before.get(tp)
            if before is None or p.leader in (NO_LEADER, before[0]):
                continue
            assert p.leader in before[1], f"{tp}: unclean election of {p.leader} (ISR was {before[1]})"

    @invariant()
    def leader_changes_are_journaled(self) -> None:
        elected = {
            (e["topic"], e["partition"]) for name, e in self.effects.events if name == "leader_elected"
        }
        for tp, p in self.core.state.all_partitions():
            before = self.before.get(tp)
            if before is not None and before[0] != p.leader:
                assert tp in elected

    @invariant()
    def requests_are_batched_and_current(self) -> None:
        seen: set[tuple[int, ApiKeys]] = set()
        live = self.core.live_brokers()
        for r in self.effects.requests:
            assert (r.broker_id, r.api_key) not in seen
            seen.add((r.broker_id, r.api_key))
            # A broker fenced in this very step (a completed controlled shutdown) still hears of it.
            assert r.broker_id in live or r.broker_id in self.live_before
            body: Any = r.body
            assert body.controller_epoch == self.core.state.controller_epoch
            if r.api_key == ApiKeys.LEADER_AND_ISR:
                for t in body.topic_states:
                    for ps in t.partition_states:
                        p = self.core.state.partition((t.topic_name, ps.partition_index))
                        assert p is not None and r.broker_id in p.replicas
                        assert (ps.leader, ps.leader_epoch, ps.isr) == (p.leader, p.leader_epoch, p.isr)


TestControllerModel = ControllerModel.TestCase
TestControllerModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
