"""Broker registration, heartbeats and fencing with a fake clock, and what the controller sends a broker
that comes (back) to life."""

from __future__ import annotations

from controller.state import NO_LEADER, ClusterState, PartitionState
from protocol import controller_messages as cm
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.unit.controller.support import (
    SESSION_MS,
    events_named,
    heartbeat,
    lair_partitions,
    live_core,
    make_core,
    register,
    registration,
    requests_by,
    set_partition,
)


def test_registration_is_fenced_until_the_first_heartbeat() -> None:
    core = make_core()
    epoch = register(core, 1)
    assert core.state.brokers[1].fenced
    effects = core.drain()
    assert effects.dirty
    assert events_named(effects, "broker_registered") == [
        {
            "broker_id": 1,
            "broker_epoch": epoch,
            "host": "127.0.0.1",
            "port": 9001,
            "incarnation_id": "inc-1",
            "restarted": False,
        }
    ]
    resp = heartbeat(core, 1)
    assert resp.error_code == 0 and not resp.is_fenced and resp.is_caught_up
    effects = core.drain()
    assert events_named(effects, "broker_unfenced") == [{"broker_id": 1, "broker_epoch": epoch}]
    assert effects.resets == [1]
    um = requests_by(effects, ApiKeys.UPDATE_METADATA)[1].body
    assert isinstance(um, cm.UpdateMetadataRequest)
    assert [b.id for b in um.live_brokers] == [1]
    assert um.controller_id == 1000 and um.controller_epoch == 1 and um.broker_epoch == epoch


def test_broker_epochs_rise_with_every_registration() -> None:
    core = make_core()
    epochs = [register(core, 1), register(core, 2), register(core, 1), register(core, 1, incarnation="x")]
    assert epochs == sorted(epochs) and len(set(epochs)) == 4


def test_wrong_cluster_and_missing_listener_are_refused() -> None:
    core = make_core()
    req = registration(1)
    req.cluster_id = "other"
    assert core.register_broker(req, 0).error_code == Errors.INCONSISTENT_CLUSTER_ID
    req = registration(1)
    req.listeners = []
    assert core.register_broker(req, 0).error_code == Errors.INVALID_REQUEST
    assert 1 not in core.state.brokers


def test_heartbeat_errors() -> None:
    core = make_core()
    unknown = core.heartbeat(cm.BrokerHeartbeatRequest(broker_id=7, broker_epoch=1), 0)
    assert unknown.error_code == Errors.BROKER_ID_NOT_REGISTERED
    epoch = register(core, 1)
    stale = core.heartbeat(cm.BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch - 1), 0)
    assert stale.error_code == Errors.STALE_BROKER_EPOCH
    assert core.state.brokers[1].fenced


def test_silent_broker_is_fenced_after_the_session_timeout() -> None:
    core = live_core([1, 2])
    assert core.tick(SESSION_MS) == []
    heartbeat(core, 2, now_ms=SESSION_MS)
    assert core.tick(SESSION_MS + 1) == [1]
    assert core.state.brokers[1].fenced and not core.state.brokers[2].fenced
    effects = core.drain()
    assert events_named(effects, "broker_fenced") == [
        {"broker_id": 1, "broker_epoch": core.state.brokers[1].epoch, "reason": "session_timeout"}
    ]
    assert core.tick(SESSION_MS * 2) == []  # fenced once
    assert core.tick(SESSION_MS * 2 + 1) == [2]


def test_next_session_expiry() -> None:
    core = live_core([1, 2])
    heartbeat(core, 2, now_ms=300)
    assert core.next_session_expiry_ms() == SESSION_MS
    core.tick(SESSION_MS + 1)
    assert core.next_session_expiry_ms() == 300 + SESSION_MS


def test_fenced_broker_that_heartbeats_again_is_unfenced_and_gets_its_state() -> None:
    core = live_core([1, 2])
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1, 2]))
    heartbeat(core, 1, now_ms=SESSION_MS)
    core.tick(SESSION_MS + 1)  # 2 fenced: leaves the ISR
    core.drain()
    assert core.state.topics["t"].partitions[0].isr == [1]
    heartbeat(core, 2, now_ms=SESSION_MS + 5)
    effects = core.drain()
    assert events_named(effects, "broker_unfenced")
    assert effects.resets == [2]
    states = lair_partitions(requests_by(effects, ApiKeys.LEADER_AND_ISR)[2])
    # The ISR shrink kept the leader epoch (KAFKA-15021); the partition epoch rose.
    assert (states[("t", 0)].leader, states[("t", 0)].isr) == (1, [1])
    assert (states[("t", 0)].leader_epoch, states[("t", 0)].partition_epoch) == (0, 1)


def test_want_fence() -> None:
    core = live_core([1])
    resp = heartbeat(core, 1, want_fence=True)
    assert resp.is_fenced and core.state.brokers[1].fenced
    assert events_named(core.drain(), "broker_fenced")[0]["reason"] == "requested"


def test_restart_with_a_new_incarnation_while_live_is_a_failure_then_a_registration() -> None:
    core = live_core([1, 2])
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 3, [1, 2]))
    old_epoch = core.state.brokers[1].epoch
    new_epoch = register(core, 1, incarnation="second-life")
    assert new_epoch > old_epoch
    effects = core.drain()
    assert [e for e, _ in effects.events] == ["broker_fenced", "leader_elected", "broker_registered"]
    assert events_named(effects, "broker_fenced")[0]["reason"] == "restarted"
    assert events_named(effects, "broker_registered")[0]["restarted"] is True
    p = core.state.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch) == (2, [2], 4)
    heartbeat(core, 1)
    effects = core.drain()
    states = lair_partitions(requests_by(effects, ApiKeys.LEADER_AND_ISR)[1])
    assert states[("t", 0)].leader == 2  # back as a follower; its leader will add it to the ISR


def test_restarted_controller_keeps_brokers_live_for_a_session_and_resyncs_them() -> None:
    core = live_core([1, 2])
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 3, [1, 2]))
    state = core.state
    state.controller_epoch += 1  # what start_new_epoch does
    core = make_core(state, now_ms=50_000)
    assert core.tick(50_000 + SESSION_MS) == []
    heartbeat(core, 1, now_ms=50_100)
    effects = core.drain()
    assert effects.resets == [1]
    lair = requests_by(effects, ApiKeys.LEADER_AND_ISR)[1].body
    assert isinstance(lair, cm.LeaderAndIsrRequest) and lair.controller_epoch == 2
    heartbeat(core, 1, now_ms=50_200)
    assert core.drain().requests == []  # synced once
    assert core.tick(50_000 + SESSION_MS + 1) == [2]
    p = state.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (1, [1])


def test_offline_partition_comes_back_with_its_last_isr_member() -> None:
    core = live_core([1, 2])
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1]))
    heartbeat(core, 2, now_ms=SESSION_MS)
    core.tick(SESSION_MS + 1)
    p = core.state.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch) == (NO_LEADER, [1], 1)
    effects = core.drain()
    assert events_named(effects, "leader_elected")[0]["leader_id"] == NO_LEADER
    heartbeat(core, 2, now_ms=SESSION_MS + 2)
    assert core.state.topics["t"].partitions[0].leader == NO_LEADER  # 2 is not in the ISR: no clean leader
    core.drain()
    heartbeat(core, 1, now_ms=SESSION_MS + 3)  # fenced broker 1 is back
    effects = core.drain()
    p = core.state.topics["t"].partitions[0]
    assert (p.leader, p.isr, p.leader_epoch) == (1, [1], 2)
    elected = events_named(effects, "leader_elected")
    assert elected[0]["reason"] == "broker_online" and elected[0]["unclean"] is False
    assert set(requests_by(effects, ApiKeys.LEADER_AND_ISR)) == {1, 2}


def test_offline_log_dir_moves_leadership_and_keeps_the_broker_fenced() -> None:
    """A broker whose log dir failed reports it in every heartbeat: its leaderships move to other ISR
    members, it leaves the ISRs, and it is not unfenced while it keeps reporting the dir."""
    core = live_core([1, 2])
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1, 2]))
    core.drain()
    resp = heartbeat(core, 1, offline_log_dirs=["/data/broker-1"])
    assert resp.is_fenced
    effects = core.drain()
    assert events_named(effects, "broker_fenced")[0]["reason"] == "log_dir_offline"
    p = core.state.topics["t"].partitions[0]
    assert (p.leader, p.isr) == (2, [2])
    assert lair_partitions(requests_by(effects, ApiKeys.LEADER_AND_ISR)[2])[("t", 0)].leader == 2
    assert heartbeat(core, 1, offline_log_dirs=["/data/broker-1"]).is_fenced
    assert not events_named(core.drain(), "broker_unfenced")


def two_listener_registration(broker_id: int) -> cm.BrokerRegistrationRequest:
    """As a broker with INTERNAL (inter-broker, sent first) and EXTERNAL listeners registers."""
    return cm.BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id="test",
        incarnation_id=f"inc-{broker_id}",
        listeners=[
            cm.BrokerRegistrationRequestListener(name="INTERNAL", host=f"broker-{broker_id}", port=19092),
            cm.BrokerRegistrationRequestListener(name="EXTERNAL", host="localhost", port=19090 + broker_id),
        ],
    )


def test_every_listener_is_kept_and_sent_to_brokers_the_first_one_is_inter_broker() -> None:
    core = make_core()
    for b in (1, 2):
        assert core.register_broker(two_listener_registration(b), 0).error_code == 0
        heartbeat(core, b)
    reg = core.state.brokers[1]
    assert (reg.host, reg.port) == ("broker-1", 19092)
    assert reg.listeners == [("INTERNAL", "broker-1", 19092), ("EXTERNAL", "localhost", 19091)]
    # kept across a controller restart
    again = ClusterState.from_json(core.state.to_json())
    assert again.brokers[1].listeners == reg.listeners

    effects = core.drain()
    um = requests_by(effects, ApiKeys.UPDATE_METADATA)[1].body
    assert isinstance(um, cm.UpdateMetadataRequest)
    [one, two] = um.live_brokers
    assert (one.host, one.port) == ("broker-1", 19092)  # the inter-broker address, as ever
    assert [(e.listener, e.host, e.port) for e in two.endpoints] == [
        ("INTERNAL", "broker-2", 19092),
        ("EXTERNAL", "localhost", 19092),
    ]

    # METADATA / DESCRIBE_CLUSTER: by listener when asked for one, else the inter-broker addresses
    by = {b.node_id: (b.host, b.port) for b in core.metadata(m.MetadataRequest(), "EXTERNAL").brokers}
    assert by == {1: ("localhost", 19091), 2: ("localhost", 19092)}
    by = {b.node_id: (b.host, b.port) for b in core.metadata(m.MetadataRequest()).brokers}
    assert by == {1: ("broker-1", 19092), 2: ("broker-2", 19092)}
    assert core.metadata(m.MetadataRequest(), "OTHER").brokers == []  # no broker has it
    described = core.describe_cluster("EXTERNAL").brokers
    assert [(b.broker_id, b.host, b.port) for b in described] == [
        (1, "localhost", 19091),
        (2, "localhost", 19092),
    ]
