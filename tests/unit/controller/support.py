"""Helpers for the controller's unit tests: a core with brokers registered and live, at a fake time."""

from __future__ import annotations

import random
from typing import Any

from controller.core import ControllerCore, ControllerSettings, Effects
from controller.request_batch import OutboundRequest
from controller.state import ClusterState, PartitionState
from controller.topics import TopicSettings
from protocol import controller_messages as cm
from protocol.api_keys import ApiKeys

SESSION_MS = 1000
CONTROLLER_ID = 1000


def make_core(
    state: ClusterState | None = None,
    *,
    now_ms: int = 0,
    unclean: bool = False,
    seed: int = 1,
    session_ms: int = SESSION_MS,
) -> ControllerCore:
    return ControllerCore(
        state or ClusterState(cluster_id="test", controller_epoch=1),
        ControllerSettings(
            controller_id=CONTROLLER_ID,
            session_timeout_ms=session_ms,
            topic_defaults=TopicSettings(unclean_leader_election_enable=unclean),
        ),
        now_ms=now_ms,
        rng=random.Random(seed),
    )


def registration(
    broker_id: int, incarnation: str | None = None, port: int | None = None
) -> cm.BrokerRegistrationRequest:
    return cm.BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id="test",
        incarnation_id=incarnation or f"inc-{broker_id}",
        listeners=[
            cm.BrokerRegistrationRequestListener(
                name="PLAINTEXT", host="127.0.0.1", port=port or 9000 + broker_id
            )
        ],
    )


def register(core: ControllerCore, broker_id: int, now_ms: int = 0, incarnation: str | None = None) -> int:
    resp = core.register_broker(registration(broker_id, incarnation), now_ms)
    assert resp.error_code == 0, resp
    return resp.broker_epoch


def heartbeat(
    core: ControllerCore, broker_id: int, now_ms: int = 0, **flags: Any
) -> cm.BrokerHeartbeatResponse:
    epoch = core.state.brokers[broker_id].epoch
    return core.heartbeat(cm.BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch, **flags), now_ms)


def live_core(brokers: list[int], **kwargs: Any) -> ControllerCore:
    """A core whose brokers are registered and unfenced; effects drained."""
    core = make_core(**kwargs)
    for b in brokers:
        register(core, b)
        heartbeat(core, b)
    core.drain()
    return core


def create_topic(
    core: ControllerCore, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None
) -> cm.CreateTopicsResponseTopic:
    resp = core.create_topics(
        cm.CreateTopicsRequest(
            topics=[
                cm.CreateTopicsRequestTopic(
                    name=name, num_partitions=partitions, replication_factor=rf, configs=configs or {}
                )
            ]
        )
    )
    return resp.topics[0]


def set_partition(core: ControllerCore, topic: str, index: int, state: PartitionState) -> None:
    from controller.state import TopicState

    t = core.state.topics.setdefault(topic, TopicState(topic, {}))
    t.partitions[index] = state


def requests_by(effects: Effects, api_key: ApiKeys) -> dict[int, OutboundRequest]:
    out: dict[int, OutboundRequest] = {}
    for r in effects.requests:
        if r.api_key == api_key:
            assert r.broker_id not in out, (
                f"two {api_key.name} requests for broker {r.broker_id} in one batch"
            )
            out[r.broker_id] = r
    return out


def lair_partitions(request: OutboundRequest) -> dict[tuple[str, int], cm.LeaderAndIsrRequestPartitionState]:
    body = request.body
    assert isinstance(body, cm.LeaderAndIsrRequest)
    return {(t.topic_name, p.partition_index): p for t in body.topic_states for p in t.partition_states}


def events_named(effects: Effects, name: str) -> list[dict[str, Any]]:
    return [fields for event, fields in effects.events if event == name]
