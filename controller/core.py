"""``ControllerCore``: the controller's state machine, synchronous and free of I/O ("functional core").

It owns the :class:`~controller.state.ClusterState` and answers every controller API with a
response dataclass. What else must happen is collected and handed out by :meth:`ControllerCore.drain`
as :class:`Effects`: the requests to send to brokers (batched per broker), the journal events, the
brokers whose send queues must be reset (they get their full state afresh) and whether the state must be
saved. Time comes in as ``now_ms`` arguments (a monotonic clock); randomness from an injected ``rng``.

The behaviour is the ZooKeeper-era ``KafkaController`` (``onBrokerStartup``, ``onBrokerFailure``,
``doControlledShutdown``, topic creation and deletion) with KRaft's broker registration, heartbeats and
fencing (``ClusterControlManager``, ``BrokerHeartbeatManager``) and ALTER_PARTITION
(``ReplicationControlManager``). As KRaft's ``PartitionChangeBuilder`` (metadata version 3.6+, KAFKA-15021),
only a leader change bumps the leader epoch: an ISR change with the same leader, made here (a broker
fenced or shutting down leaves the ISRs) or asked for with ALTER_PARTITION, bumps only the partition
epoch, and brokers apply a LEADER_AND_ISR of the same leader epoch with a newer partition epoch.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller import elections as el
from controller import reassignment as ra
from controller.config_control import ConfigChange, incremental_topic_configs, replaced_topic_configs
from controller.describe import describe_cluster_response, metadata_response
from controller.leader_election import elect_leader
from controller.log_configs import TOPIC_CONFIG_DEFS
from controller.request_batch import OutboundRequest, RequestBatch
from controller.state import (
    EPOCH_DURING_DELETE,
    NO_LEADER,
    BrokerRegistration,
    ClusterState,
    PartitionState,
    TopicState,
)
from controller.topics import (
    KAFKA_TOPIC_CONFIG_DEFAULTS,
    TopicPlan,
    TopicSettings,
    plan_topic,
    replication_factor_unreachable,
)
from protocol import admin_messages as am
from protocol import config_messages as cfm
from protocol import controller_messages as cm
from protocol import messages as m
from protocol import producer_id_messages as pim
from protocol.admin_bounds import (
    EXCESSIVE_BATCH_ERROR,
    EXCESSIVE_BATCH_MESSAGE,
    EXCESSIVE_PARTITIONS_ERROR,
    EXCESSIVE_PARTITIONS_MESSAGE,
    MAX_RECORDS_PER_USER_OP,
    METADATA_STATE_MAX_BYTES,
    create_partitions_too_many,
    create_topics_too_many_partitions,
    new_partitions_bytes,
    new_topic_bytes,
    state_too_large_message,
    too_many_records,
)
from protocol.common import TopicPartition
from protocol.errors import Errors, KafkaError
from protocol.security_messages import UpdateMetadataSecurity
from server.producer_ids import generate_next_block

log = logging.getLogger(__name__)

JournalEvent = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    controller_id: int
    session_timeout_ms: int
    topic_defaults: TopicSettings = field(default_factory=TopicSettings)


@dataclass(slots=True)
class Effects:
    """What the shell must do after a call: reset the send queues of ``resets`` (before queueing),
    queue ``requests``, journal ``events`` and, if ``dirty``, save the state (first of all)."""

    requests: list[OutboundRequest] = field(default_factory=list)
    events: list[JournalEvent] = field(default_factory=list)
    resets: list[int] = field(default_factory=list)
    dirty: bool = False


class ControllerCore:
    def __init__(
        self, state: ClusterState, settings: ControllerSettings, *, now_ms: int, rng: random.Random
    ) -> None:
        self.state = state
        self.settings = settings
        self.rng = rng
        # Every known broker gets a full session from the controller's start (as a new KRaft leader does).
        self._last_contact: dict[int, int] = dict.fromkeys(state.brokers, now_ms)
        # Brokers this controller has sent their full state to since it started.
        self._synced: set[int] = set()
        self._batch = RequestBatch()
        self._events: list[JournalEvent] = []
        self._resets: list[int] = []
        self._dirty = False
        # The ACLs and SCRAM credentials every UPDATE_METADATA carries (None until there are any).
        self.security: UpdateMetadataSecurity | None = None
        # In a quorum, the size of the state's last metadata record (set by the shell after each append):
        # creations that would make it pass METADATA_STATE_MAX_BYTES are refused. None: no bound.
        self.state_record_bytes: int | None = None

    def security_changed(self, security: UpdateMetadataSecurity, *, record: bool = False) -> None:
        """A new version of the ACLs and credentials: every live broker gets it in an UPDATE_METADATA. With
        ``record`` (a controller quorum) the change is also a metadata record to commit first."""
        self.security = security
        if record:
            self._dirty = True
        self._batch.add_update_metadata(self.live_brokers(), [])

    # ------------------------------------------------------------------------------------ views

    @property
    def controller_id(self) -> int:
        return self.settings.controller_id

    def live_brokers(self) -> set[int]:
        """Registered and not fenced (Kafka's live-or-shutting-down brokers)."""
        return {b for b, reg in self.state.brokers.items() if not reg.fenced}

    def shutting_down_brokers(self) -> set[int]:
        return {b for b, reg in self.state.brokers.items() if reg.in_controlled_shutdown and not reg.fenced}

    def eligible_brokers(self) -> set[int]:
        """Brokers that may lead or join an ISR: live and not shutting down."""
        return self.live_brokers() - self.shutting_down_brokers()

    def ineligible_reason(self, broker_id: int) -> str | None:
        reg = self.state.brokers.get(broker_id)
        if reg is None:
            return "not registered"
        if reg.fenced:
            return "fenced"
        if reg.in_controlled_shutdown:
            return "shutting down"
        return None

    def unclean_enabled(self, topic: str) -> bool:
        t = self.state.topics.get(topic)
        raw = None if t is None else t.configs.get("unclean.leader.election.enable")
        if raw is None:
            return self.settings.topic_defaults.unclean_leader_election_enable
        return raw.strip().lower() == "true"

    def drain(self) -> Effects:
        """The effects of the calls since the last drain (then forgotten)."""
        effects = Effects(
            requests=self._batch.build(self.state, self.controller_id, self.security),
            events=self._events,
            resets=self._resets,
            dirty=self._dirty,
        )
        self._batch = RequestBatch()
        self._events = []
        self._resets = []
        self._dirty = False
        return effects

    def _emit(self, event: str, **fields: Any) -> None:
        self._events.append((event, fields))

    # ------------------------------------------------------------------------ partition changes

    def _apply(
        self,
        tp: TopicPartition,
        p: PartitionState,
        leader: int,
        isr: list[int],
        reason: str,
        unclean: bool = False,
    ) -> None:
        """A controller-made change: the partition epoch rises, the leader epoch only with a new leader
        (NO_LEADER included; an ISR shrink keeps it, KAFKA-15021); live replicas get LEADER_AND_ISR, every
        live broker UPDATE_METADATA."""
        old_leader = p.leader
        p.leader = leader
        p.isr = list(isr)
        if leader != old_leader:
            p.leader_epoch += 1
        p.partition_epoch += 1
        p.controller_epoch = self.state.controller_epoch
        self._dirty = True
        common = {
            "topic": tp[0],
            "partition": tp[1],
            "leader_epoch": p.leader_epoch,
            "isr": list(p.isr),
            "partition_epoch": p.partition_epoch,
            "reason": reason,
        }
        if leader != old_leader:
            self._emit(
                "leader_elected", leader_id=leader, previous_leader_id=old_leader, unclean=unclean, **common
            )
        else:
            self._emit("isr_changed", leader_id=leader, **common)
        live = self.live_brokers()
        self._batch.add_leader_and_isr([r for r in p.replicas if r in live], tp)
        self._batch.add_update_metadata(live, [tp])

    def _elect_offline_partitions(self, reason: str) -> None:
        """Kafka's ``triggerOnlinePartitionStateChange`` for partitions with no leader."""
        live, shutting = self.live_brokers(), self.shutting_down_brokers()
        for tp, p in self.state.all_partitions():
            if p.leader != NO_LEADER:
                continue
            change = el.elect_offline_leader(p, live, self.unclean_enabled(tp[0]), shutting)
            if change is not None:
                self._apply(tp, p, change.leader, change.isr, reason, change.unclean)

    def _on_broker_failure(self, broker_id: int, reason: str) -> None:
        """The broker is fenced already: move its leaderships, take it out of ISRs."""
        self._synced.discard(broker_id)
        live, shutting = self.live_brokers(), self.shutting_down_brokers()
        touched: list[TopicPartition] = []
        for tp, p in self.state.all_partitions():
            if broker_id not in p.replicas:
                continue
            touched.append(tp)
            if p.leader == broker_id:
                change = el.elect_offline_leader(p, live, self.unclean_enabled(tp[0]), shutting)
                if change is not None:
                    self._apply(tp, p, change.leader, change.isr, reason, change.unclean)
                    continue
            removal = el.remove_replica_from_isr(p, broker_id)
            if removal is not None:
                self._apply(tp, p, removal.leader, removal.isr, reason)
        self._batch.add_update_metadata(live, touched)

    def _on_broker_startup(self, broker_id: int) -> None:
        """The broker is live: elect leaders where it makes that possible, then send it the full state of
        its replicas, and every live broker the new broker list (Kafka's ``onBrokerStartup``)."""
        self._synced.add(broker_id)
        self._resets.append(broker_id)
        self._elect_offline_partitions("broker_online")
        live = self.live_brokers()
        mine = [tp for tp, p in self.state.all_partitions() if broker_id in p.replicas]
        for tp in mine:
            p = self.state.partition(tp)
            if p is not None and p.leader != NO_LEADER:
                self._batch.add_leader_and_isr([broker_id], tp)
        self._batch.add_update_metadata([broker_id], [tp for tp, _ in self.state.all_partitions()])
        self._batch.add_update_metadata(live, mine)
        pending = self.state.pending_deletions.pop(broker_id, [])
        for tp in pending:
            self._batch.add_stop_replica(broker_id, tp, EPOCH_DURING_DELETE, True)
        if pending:
            self._dirty = True

    def resync_all(self) -> None:
        """A newly active controller: every live broker gets the full state of its replicas (LEADER_AND_ISR)
        and of the cluster (UPDATE_METADATA), stamped with this controller's epoch."""
        for broker_id in sorted(self.live_brokers()):
            self._on_broker_startup(broker_id)

    def _fence(self, reg: BrokerRegistration, reason: str) -> None:
        reg.fenced = True
        self._dirty = True
        self._emit("broker_fenced", broker_id=reg.broker_id, broker_epoch=reg.epoch, reason=reason)
        self._on_broker_failure(reg.broker_id, f"broker_{reason}")

    # ------------------------------------------------------------------------ brokers

    def register_broker(
        self, req: cm.BrokerRegistrationRequest, now_ms: int
    ) -> cm.BrokerRegistrationResponse:
        """A new registration, always fenced until the broker's first heartbeat. A broker registering
        while it is live (a restart faster than the session timeout, or a broker that lost its epoch)
        is first treated as failed, as Kafka's controller treats a bounced broker."""
        if req.cluster_id != self.state.cluster_id:
            return cm.BrokerRegistrationResponse(error_code=int(Errors.INCONSISTENT_CLUSTER_ID))
        if not req.listeners:
            return cm.BrokerRegistrationResponse(error_code=int(Errors.INVALID_REQUEST))
        # The first listener is the broker's inter-broker one (what it registers first), as the controller
        # and the other brokers reach it; all of them are kept for METADATA by listener.
        listener = req.listeners[0]
        existing = self.state.brokers.get(req.broker_id)
        restarted = existing is not None and existing.incarnation_id != req.incarnation_id
        if existing is not None and not existing.fenced:
            self._fence(existing, "restarted" if restarted else "re_registered")
        reg = BrokerRegistration(
            broker_id=req.broker_id,
            host=listener.host,
            port=listener.port,
            epoch=self.state.allocate_broker_epoch(),
            incarnation_id=req.incarnation_id,
            fenced=True,
            listeners=[(li.name.upper(), li.host, li.port) for li in req.listeners],
        )
        self.state.brokers[req.broker_id] = reg
        self._last_contact[req.broker_id] = now_ms
        self._synced.discard(req.broker_id)
        self._dirty = True
        self._emit(
            "broker_registered",
            broker_id=reg.broker_id,
            broker_epoch=reg.epoch,
            host=reg.host,
            port=reg.port,
            incarnation_id=reg.incarnation_id,
            restarted=restarted,
        )
        return cm.BrokerRegistrationResponse(broker_epoch=reg.epoch)

    def heartbeat(self, req: cm.BrokerHeartbeatRequest, now_ms: int) -> cm.BrokerHeartbeatResponse:
        reg = self.state.brokers.get(req.broker_id)
        if reg is None:
            return cm.BrokerHeartbeatResponse(error_code=int(Errors.BROKER_ID_NOT_REGISTERED))
        if req.broker_epoch != reg.epoch:
            return cm.BrokerHeartbeatResponse(error_code=int(Errors.STALE_BROKER_EPOCH), is_fenced=reg.fenced)
        self._last_contact[reg.broker_id] = now_ms
        if req.want_shut_down:
            remaining = [] if reg.fenced else self._controlled_shutdown(reg)
            if not remaining and not reg.fenced:
                self._fence(reg, "controlled_shutdown")
            return cm.BrokerHeartbeatResponse(
                is_caught_up=True, is_fenced=reg.fenced, should_shut_down=not remaining
            )
        if req.offline_log_dirs:
            # Its one log directory failed: every replica it holds is offline (KRaft's OfflineLogDirs).
            if not reg.fenced:
                self._fence(reg, "log_dir_offline")
        elif req.want_fence:
            if not reg.fenced:
                self._fence(reg, "requested")
        elif reg.fenced:
            reg.fenced = False
            reg.in_controlled_shutdown = False
            self._dirty = True
            self._emit("broker_unfenced", broker_id=reg.broker_id, broker_epoch=reg.epoch)
            self._on_broker_startup(reg.broker_id)
        elif reg.broker_id not in self._synced:
            self._on_broker_startup(reg.broker_id)  # live before this controller started
        return cm.BrokerHeartbeatResponse(is_caught_up=True, is_fenced=reg.fenced)

    def allocate_producer_ids(self, req: pim.AllocateProducerIdsRequest) -> pim.AllocateProducerIdsResponse:
        """The broker's next block of producer ids (Kafka's ``ProducerIdControlManager``), saved before it
        is answered (the state is dirty)."""
        reg = self.state.brokers.get(req.broker_id)
        if reg is None:
            return pim.AllocateProducerIdsResponse(error_code=int(Errors.BROKER_ID_NOT_REGISTERED))
        if req.broker_epoch != reg.epoch:
            return pim.AllocateProducerIdsResponse(error_code=int(Errors.STALE_BROKER_EPOCH))
        try:
            block, record = generate_next_block(self.state.producer_ids, req.broker_id, req.broker_epoch)
        except KafkaError as exc:  # the int64 range is used up: Kafka answers UNKNOWN_SERVER_ERROR
            log.error("controller: no producer id block for broker %d: %s", req.broker_id, exc.message)
            return pim.AllocateProducerIdsResponse(error_code=int(exc.error))
        self.state.producer_ids = record
        self._dirty = True
        log.info(
            "controller: producer ids %d..%d to broker %d",
            block.first_producer_id,
            block.last_producer_id,
            req.broker_id,
        )
        return pim.AllocateProducerIdsResponse(
            producer_id_start=block.first_producer_id, producer_id_len=block.size
        )

    def tick(self, now_ms: int) -> list[int]:
        """Fences the brokers silent for longer than ``broker.session.timeout.ms``; returns their ids."""
        fenced: list[int] = []
        for broker_id, reg in sorted(self.state.brokers.items()):
            last = self._last_contact.get(broker_id, now_ms)
            if not reg.fenced and now_ms - last > self.settings.session_timeout_ms:
                self._fence(reg, "session_timeout")
                fenced.append(broker_id)
        return fenced

    def next_session_expiry_ms(self) -> int | None:
        deadlines = [
            self._last_contact.get(b, 0) + self.settings.session_timeout_ms
            for b, reg in self.state.brokers.items()
            if not reg.fenced
        ]
        return min(deadlines) if deadlines else None

    # ------------------------------------------------------------------------ controlled shutdown

    def controlled_shutdown(self, req: cm.ControlledShutdownRequest) -> cm.ControlledShutdownResponse:
        reg = self.state.brokers.get(req.broker_id)
        if reg is None:
            return cm.ControlledShutdownResponse(error_code=int(Errors.BROKER_ID_NOT_REGISTERED))
        if req.broker_epoch != -1 and req.broker_epoch != reg.epoch:
            return cm.ControlledShutdownResponse(error_code=int(Errors.STALE_BROKER_EPOCH))
        remaining = [] if reg.fenced else self._controlled_shutdown(reg)
        return cm.ControlledShutdownResponse(
            remaining_partitions=[
                cm.ControlledShutdownResponsePartition(topic_name=t, partition_index=i) for t, i in remaining
            ]
        )

    def _controlled_shutdown(self, reg: BrokerRegistration) -> list[TopicPartition]:
        """KRaft's ``handleBrokerInControlledShutdown``: the broker leaves every ISR it is in (unless it is
        the last member) and its leaderships move to another live ISR member that is not shutting down;
        where there is none, the partition is left without a leader (NO_LEADER, the ISR keeping its last
        member) rather than holding the broker back, as KRaft does without ELR. As a follower the broker
        is told to stop its replicas. Returns the partitions it still leads: none once this ran."""
        b = reg.broker_id
        first = not reg.in_controlled_shutdown
        if first:
            reg.in_controlled_shutdown = True
            self._dirty = True
            self._emit("broker_shutting_down", broker_id=b, broker_epoch=reg.epoch)
            # Every broker learns that it is going (UPDATE_METADATA leaves it out of the live brokers).
            self._batch.add_update_metadata(self.live_brokers(), [])
        live, shutting = self.live_brokers(), self.shutting_down_brokers()
        for tp, p in self.state.all_partitions():
            if b not in p.replicas:
                continue
            led = p.leader == b
            change = el.controlled_shutdown_change(p, b, live, shutting)
            if change is not None:
                self._apply(tp, p, change.leader, change.isr, "controlled_shutdown")
            if not led and (first or change is not None):
                self._batch.add_stop_replica(b, tp, p.leader_epoch, False)
        return [tp for tp, p in self.state.all_partitions() if p.leader == b]

    # ------------------------------------------------------------------------ ALTER_PARTITION

    def alter_partition(self, req: cm.AlterPartitionRequest) -> cm.AlterPartitionResponse:
        reg = self.state.brokers.get(req.broker_id)
        if reg is None or reg.epoch != req.broker_epoch:
            return cm.AlterPartitionResponse(error_code=int(Errors.STALE_BROKER_EPOCH))
        topics: list[cm.AlterPartitionResponseTopic] = []
        for t in req.topics:
            out = cm.AlterPartitionResponseTopic(topic_name=t.topic_name)
            topics.append(out)
            for data in t.partitions:
                tp = (t.topic_name, data.partition_index)
                p = self.state.partition(tp)
                if p is None:
                    out.partitions.append(
                        cm.AlterPartitionResponsePartition(
                            partition_index=tp[1], error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                        )
                    )
                    continue
                error, why = el.validate_alter_partition(
                    p,
                    req.broker_id,
                    data.leader_epoch,
                    data.partition_epoch,
                    data.new_isr,
                    self.ineligible_reason,
                )
                if error != Errors.NONE:
                    log.info(
                        "rejecting ALTER_PARTITION from broker %d for %s-%d: %s (%s)",
                        req.broker_id,
                        tp[0],
                        tp[1],
                        why,
                        error.name,
                    )
                elif sorted(data.new_isr) != sorted(p.isr):
                    p.isr = list(data.new_isr)
                    p.partition_epoch += 1
                    p.controller_epoch = self.state.controller_epoch
                    self._dirty = True
                    self._emit(
                        "isr_changed",
                        topic=tp[0],
                        partition=tp[1],
                        leader_id=p.leader,
                        isr=list(p.isr),
                        partition_epoch=p.partition_epoch,
                        leader_epoch=p.leader_epoch,
                        reason="alter_partition",
                    )
                    self._batch.add_update_metadata(self.live_brokers(), [tp])
                    self._maybe_complete_reassignment(tp, p)
                out.partitions.append(
                    cm.AlterPartitionResponsePartition(
                        partition_index=tp[1],
                        error_code=int(error),
                        leader_id=p.leader,
                        leader_epoch=p.leader_epoch,
                        isr=list(p.isr),
                        partition_epoch=p.partition_epoch,
                    )
                )
        return cm.AlterPartitionResponse(topics=topics)

    # ------------------------------------------------------------------------ topics

    def create_topics(self, req: cm.CreateTopicsRequest) -> cm.CreateTopicsResponse:
        """Kafka's ControllerApis.createTopics: a name given more than once is answered once, INVALID_REQUEST,
        and not created; every other topic gets its full checks. ``validate_only`` runs the same checks
        (replication factor against the live brokers, configs) and creates nothing. A success carries the
        partitions, replication factor and effective configs (CreateTopics v5+, KIP-525)."""
        counts = Counter(t.name for t in req.topics)
        unique = [t for t in req.topics if counts[t.name] == 1]
        defaults = self.settings.topic_defaults
        # Kafka's bounds (controller/bounds.py), before anything is assigned: the whole request is
        # refused, every topic it names answered the same.
        if create_topics_too_many_partitions(unique, defaults.num_partitions):
            return _create_topics_refused(req, EXCESSIVE_PARTITIONS_ERROR, EXCESSIVE_PARTITIONS_MESSAGE)
        plans = self._plan_topics(unique, validate_only=req.validate_only)
        records = sum(
            1 + len(t.configs) + len(plan.assignment) for t, plan in plans if isinstance(plan, TopicPlan)
        )
        if too_many_records(records):
            return _create_topics_refused(req, EXCESSIVE_BATCH_ERROR, EXCESSIVE_BATCH_MESSAGE)
        growth = sum(
            new_topic_bytes(t.name, t.configs)
            + new_partitions_bytes(len(plan.assignment), plan.replication_factor, self._broker_id_max())
            for t, plan in plans
            if isinstance(plan, TopicPlan)
        )
        too_large = self._state_too_large(growth)
        if too_large is not None:
            return _create_topics_refused(req, EXCESSIVE_BATCH_ERROR, too_large)
        out: list[cm.CreateTopicsResponseTopic] = []
        for t, plan in plans:
            if isinstance(plan, TopicPlan):
                error, message = Errors.NONE, ""
                if not req.validate_only:
                    self._create_topic(t, plan)
            else:
                error, message = plan
            result = cm.CreateTopicsResponseTopic(
                name=t.name, error_code=int(error), error_message=message if error != Errors.NONE else None
            )
            if error == Errors.NONE:
                self._describe_created(t, result)
            out.append(result)
        out.extend(
            cm.CreateTopicsResponseTopic(
                name=name, error_code=int(Errors.INVALID_REQUEST), error_message="Duplicate topic name."
            )
            for name, count in counts.items()
            if count > 1
        )
        return cm.CreateTopicsResponse(topics=out)

    def _broker_id_max(self) -> int:
        return max(self.state.brokers, default=0)

    def _state_too_large(self, growth: int) -> str | None:
        """None if the state record may grow by ``growth`` bytes, else why not."""
        if self.state_record_bytes is None:
            return None
        projected = self.state_record_bytes + growth
        return state_too_large_message(projected) if projected > METADATA_STATE_MAX_BYTES else None

    def _plan_topics(
        self, topics: list[cm.CreateTopicsRequestTopic], *, validate_only: bool
    ) -> list[tuple[cm.CreateTopicsRequestTopic, TopicPlan | tuple[Errors, str]]]:
        """Each topic's checks and assignment, in order, as if the ones before it were created (a name
        colliding with an earlier topic of the request is refused), changing nothing."""
        planned = dataclasses.replace(self.state, topics=dict(self.state.topics))
        eligible = sorted(self.eligible_brokers())
        out: list[tuple[cm.CreateTopicsRequestTopic, TopicPlan | tuple[Errors, str]]] = []
        for t in topics:
            # validate_only plans with a throwaway generator so that checking leaves later assignments alone
            rng = random.Random(0) if validate_only else self.rng
            plan = plan_topic(t, planned, self.settings.topic_defaults, eligible, rng)
            if isinstance(plan, TopicPlan):
                planned.topics[t.name] = TopicState(t.name, {})
            out.append((t, plan))
        return out

    def _describe_created(self, t: cm.CreateTopicsRequestTopic, result: cm.CreateTopicsResponseTopic) -> None:
        defaults = self.settings.topic_defaults
        topic = self.state.topics.get(t.name)
        if topic is not None:
            result.num_partitions = len(topic.partitions)
            result.replication_factor = len(topic.partitions[0].replicas) if topic.partitions else -1
        elif t.assignments:  # validate_only with a manual assignment
            result.num_partitions = len(t.assignments)
            result.replication_factor = len(t.assignments[0].broker_ids)
        else:  # validate_only: what creating would have made
            result.num_partitions = defaults.num_partitions if t.num_partitions == -1 else t.num_partitions
            result.replication_factor = (
                defaults.default_replication_factor if t.replication_factor == -1 else t.replication_factor
            )
        static = self._static_topic_configs()
        for key in sorted(set(KAFKA_TOPIC_CONFIG_DEFAULTS) | set(t.configs)):
            entry = _topic_config_entry(key, t.configs, static)
            if entry is not None:
                result.configs.append(
                    cm.CreateTopicsResponseConfig(
                        name=entry.name,
                        value=entry.value,
                        read_only=entry.read_only,
                        config_source=entry.config_source,
                        is_sensitive=entry.is_sensitive,
                    )
                )

    def _static_topic_configs(self) -> dict[str, str]:
        """The controller's settings that stand in for a topic config the topic does not set."""
        defaults = self.settings.topic_defaults
        return {
            "min.insync.replicas": str(defaults.min_insync_replicas),
            "unclean.leader.election.enable": str(defaults.unclean_leader_election_enable).lower(),
        }

    def _create_topic(self, t: cm.CreateTopicsRequestTopic, plan: TopicPlan) -> None:
        assignment = plan.assignment
        partitions, rf = len(assignment), plan.replication_factor
        epoch = self.state.controller_epoch
        # a manual assignment may name brokers that are not usable now: the ISR is the usable ones
        eligible = self.eligible_brokers()
        isrs = {i: [b for b in r if b in eligible] for i, r in assignment.items()}
        topic = TopicState(
            t.name,
            {i: PartitionState(list(r), isrs[i][0], 0, isrs[i], 0, epoch) for i, r in assignment.items()},
            dict(t.configs),
        )
        self.state.topics[t.name] = topic
        self._dirty = True
        self._emit(
            "topic_created",
            topic=t.name,
            partitions=partitions,
            replication_factor=rf,
            assignment={str(i): r for i, r in assignment.items()},
            configs=dict(t.configs),
        )
        self._announce_new_partitions(t.name, topic, sorted(topic.partitions))

    def _announce_new_partitions(self, name: str, topic: TopicState, indices: list[int]) -> None:
        """Journals the first election of each new partition ``indices`` of ``name`` and sends its replicas
        their LEADER_AND_ISR (``is_new``), then every live broker the metadata."""
        for i in indices:
            p = topic.partitions[i]
            self._emit(
                "leader_elected",
                topic=name,
                partition=i,
                leader_id=p.leader,
                previous_leader_id=NO_LEADER,
                leader_epoch=p.leader_epoch,
                isr=list(p.isr),
                partition_epoch=p.partition_epoch,
                unclean=False,
                reason="new_partition",
            )
            self._batch.add_leader_and_isr(p.replicas, (name, i), is_new=True)
        self._batch.add_update_metadata(self.live_brokers(), [(name, i) for i in indices])

    def create_partitions(self, req: cm.CreatePartitionsRequest) -> cm.CreatePartitionsResponse:
        """Kafka's CreatePartitions (KRaft's ReplicationControlManager.createPartitions): a topic grows to
        ``count`` partitions, the new ones assigned as a new topic's (or as the request's ``assignments``
        say), with the topic's replication factor; each new partition is led by its first replica, with every
        replica in its ISR. A name given twice is answered once, INVALID_REQUEST; ``validate_only`` checks
        and changes nothing."""
        counts = Counter(t.name for t in req.topics)
        unique = [t for t in req.topics if counts[t.name] == 1]
        current = {t.name: len(topic.partitions) for t in unique if (topic := self.state.topics.get(t.name))}
        refusal: tuple[Errors, str] | None = None
        if create_partitions_too_many(unique, current):
            refusal = EXCESSIVE_PARTITIONS_ERROR, EXCESSIVE_PARTITIONS_MESSAGE
        else:
            growth = sum(
                new_partitions_bytes(
                    t.count - current[t.name],
                    len(self.state.topics[t.name].partitions[0].replicas),
                    self._broker_id_max(),
                )
                for t in unique
                if t.name in current
                and t.count > current[t.name]
                and 0 in self.state.topics[t.name].partitions
            )
            too_large = self._state_too_large(growth)
            if too_large is not None:
                refusal = EXCESSIVE_BATCH_ERROR, too_large
        if refusal is not None:
            return cm.CreatePartitionsResponse(
                results=[
                    cm.CreatePartitionsTopicResult(
                        name=t.name, error_code=int(refusal[0]), error_message=refusal[1]
                    )
                    for t in req.topics
                ]
            )
        out: list[cm.CreatePartitionsTopicResult] = []
        for t in unique:
            error, message = self._create_partitions(t, validate_only=req.validate_only)
            out.append(
                cm.CreatePartitionsTopicResult(
                    name=t.name,
                    error_code=int(error),
                    error_message=message if error != Errors.NONE else None,
                )
            )
        out.extend(
            cm.CreatePartitionsTopicResult(
                name=name, error_code=int(Errors.INVALID_REQUEST), error_message="Duplicate topic name."
            )
            for name, count in counts.items()
            if count > 1
        )
        return cm.CreatePartitionsResponse(results=out)

    def _create_partitions(self, t: cm.CreatePartitionsTopic, *, validate_only: bool) -> tuple[Errors, str]:
        topic = self.state.topics.get(t.name)
        if topic is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {t.name!r}"
        current = len(topic.partitions)
        if t.count < current:
            return Errors.INVALID_PARTITIONS, (
                f"The topic {t.name} currently has {current} partition(s); {t.count} would not be an "
                "increase."
            )
        if t.count == current:
            return Errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s)."
        added = t.count - current
        rf = len(topic.partitions[0].replicas) if topic.partitions else 1
        eligible = sorted(self.eligible_brokers())
        if t.assignments is not None:
            if len(t.assignments) != added:
                return Errors.INVALID_REPLICA_ASSIGNMENT, (
                    f"Attempted to add {added} additional partition(s), but only {len(t.assignments)} "
                    "assignment(s) were specified."
                )
            assignment: dict[int, list[int]] = {}
            for i, a in enumerate(t.assignments):
                replicas = list(a.broker_ids)
                if len(set(replicas)) != len(replicas):
                    return Errors.INVALID_REPLICA_ASSIGNMENT, (
                        f"The manual partition assignment {replicas} names a broker more than once."
                    )
                if len(replicas) != rf:
                    return Errors.INVALID_REPLICA_ASSIGNMENT, (
                        f"The manual partition assignment includes a partition with {len(replicas)} "
                        f"replica(s), but this is not consistent with previous partitions, which have {rf} "
                        "replica(s)."
                    )
                unusable = [b for b in replicas if b not in eligible]
                if unusable:
                    return Errors.INVALID_REPLICA_ASSIGNMENT, (
                        f"The manual partition assignment includes broker(s) {unusable}, which are not "
                        f"registered, live and unfenced (usable: {eligible})."
                    )
                assignment[current + i] = replicas
        else:
            if rf > len(eligible):
                return Errors.INVALID_REPLICATION_FACTOR, replication_factor_unreachable(rf, eligible)
            rng = random.Random(0) if validate_only else self.rng
            assignment = el.assign_replicas_to_brokers(eligible, added, rf, rng, start_partition_id=current)
        if validate_only:
            return Errors.NONE, ""
        epoch = self.state.controller_epoch
        for i, r in assignment.items():
            topic.partitions[i] = PartitionState(list(r), r[0], 0, list(r), 0, epoch)
        self._dirty = True
        self._emit(
            "partitions_created",
            topic=t.name,
            partitions=t.count,
            previous_partitions=current,
            assignment={str(i): r for i, r in assignment.items()},
        )
        self._announce_new_partitions(t.name, topic, sorted(assignment))
        return Errors.NONE, ""

    def delete_topics(self, req: cm.DeleteTopicsRequest) -> cm.DeleteTopicsResponse:
        """A name given more than once is answered once, INVALID_REQUEST, and not deleted (Kafka's
        ControllerApis.deleteTopics); the others are deleted."""
        counts = Counter(req.topic_names)
        out: list[cm.DeleteTopicsResponseTopic] = []
        live = self.live_brokers()
        deleted = 0
        for name in req.topic_names:
            if counts[name] > 1:
                continue
            if name in self.state.topics and too_many_records(deleted + 1):
                # One record per topic deleted: past Kafka's bound the rest are refused, as Kafka's
                # ReplicationControlManager.deleteTopics answers each topic its BoundedList refuses.
                out.append(
                    cm.DeleteTopicsResponseTopic(
                        name=name,
                        error_code=int(Errors.UNKNOWN_SERVER_ERROR),
                        error_message=f"{EXCESSIVE_BATCH_MESSAGE} At most {MAX_RECORDS_PER_USER_OP} topics "
                        "are deleted per request.",
                    )
                )
                continue
            topic = self.state.topics.pop(name, None)
            if topic is None:
                out.append(
                    cm.DeleteTopicsResponseTopic(
                        name=name,
                        error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                        error_message=f"unknown topic {name!r}",
                    )
                )
                continue
            waiting: set[int] = set()
            for i, p in sorted(topic.partitions.items()):
                tp = (name, i)
                self._batch.deleted[tp] = list(p.replicas)
                for r in p.replicas:
                    if r in live:
                        self._batch.add_stop_replica(r, tp, EPOCH_DURING_DELETE, True)
                    else:
                        self.state.pending_deletions.setdefault(r, []).append(tp)
                        waiting.add(r)
            self._batch.add_update_metadata(live, [(name, i) for i in topic.partitions])
            deleted += 1
            self._dirty = True
            self._emit(
                "topic_deleted", topic=name, partitions=len(topic.partitions), pending_brokers=sorted(waiting)
            )
            out.append(cm.DeleteTopicsResponseTopic(name=name))
        out.extend(
            cm.DeleteTopicsResponseTopic(
                name=name, error_code=int(Errors.INVALID_REQUEST), error_message="Duplicate topic name."
            )
            for name, count in counts.items()
            if count > 1
        )
        return cm.DeleteTopicsResponse(responses=out)

    # ------------------------------------------------------------------------ descriptions

    def metadata(self, req: m.MetadataRequest, listener: str | None = None) -> m.MetadataResponse:
        return metadata_response(self.state, self.controller_id, req, listener)

    def describe_configs(self, req: cm.DescribeConfigsRequest) -> cm.DescribeConfigsResponse:
        """Topic configs as Kafka lists them (docs/clients.md): every topic config isrsim acts on, each with
        its value and source: the topic's own (TOPIC_CONFIG), the controller's setting where it differs
        from Kafka's default (STATIC_BROKER_CONFIG), else Kafka's default (DEFAULT_CONFIG, ``is_default``)."""
        static = self._static_topic_configs()
        results: list[cm.DescribeConfigsResponseResult] = []
        for r in req.resources:
            result = cm.DescribeConfigsResponseResult(
                resource_type=r.resource_type, resource_name=r.resource_name
            )
            topic = self.state.topics.get(r.resource_name)
            if r.resource_type != cm.CONFIG_RESOURCE_TOPIC:
                result.error_code = int(Errors.INVALID_REQUEST)
                result.error_message = f"resource type {r.resource_type}: only topics (2) are described"
            elif topic is None:
                result.error_code = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                result.error_message = f"unknown topic {r.resource_name!r}"
            else:
                every = sorted(set(KAFKA_TOPIC_CONFIG_DEFAULTS) | set(topic.configs))
                # no keys, null or empty, means every key (Kafka's ConfigHelper.describeConfigs)
                keys = r.configuration_keys or every
                for key in keys:
                    entry = _topic_config_entry(key, topic.configs, static)
                    if entry is not None:
                        definition = TOPIC_CONFIG_DEFS.get(key)
                        if definition is not None:
                            entry.config_type = definition.config_type
                            if req.include_documentation:
                                entry.documentation = definition.documentation
                        result.configs.append(entry)
            results.append(result)
        return cm.DescribeConfigsResponse(results=results)

    # ------------------------------------------------------------------------ config changes

    def alter_configs(self, req: cfm.AlterConfigsRequest) -> cfm.AlterConfigsResponse:
        """Kafka's AlterConfigs: each topic's configs become exactly those given (validated first)."""
        out = self._alter_each(
            [(r.resource_type, r.resource_name) for r in req.resources],
            lambda i, current, broker: replaced_topic_configs(req.resources[i].configs, broker=broker),
            validate_only=req.validate_only,
        )
        return cfm.AlterConfigsResponse(responses=out)

    def incremental_alter_configs(
        self, req: cfm.IncrementalAlterConfigsRequest
    ) -> cfm.IncrementalAlterConfigsResponse:
        """Kafka's IncrementalAlterConfigs: SET, DELETE, APPEND, SUBTRACT on single keys of each topic."""
        out = self._alter_each(
            [(r.resource_type, r.resource_name) for r in req.resources],
            lambda i, current, broker: incremental_topic_configs(
                current, req.resources[i].configs, broker=broker
            ),
            validate_only=req.validate_only,
        )
        return cfm.IncrementalAlterConfigsResponse(responses=out)

    def _alter_each(
        self,
        resources: list[tuple[int, str]],
        change: Callable[[int, dict[str, str], bool], ConfigChange],
        *,
        validate_only: bool,
    ) -> list[cfm.AlterConfigsResourceResponse]:
        """A resource named twice is answered INVALID_REQUEST and not changed; a topic's new configs, and a
        BROKER resource's ("": every broker's default, or one broker's id) dynamic configs, are a metadata
        change every live broker hears of (UPDATE_METADATA carries them)."""
        counts = Counter(resources)
        out: list[cfm.AlterConfigsResourceResponse] = []
        for i, (rtype, name) in enumerate(resources):
            error, message = Errors.NONE, ""
            topic = self.state.topics.get(name)
            if counts[(rtype, name)] > 1:
                error, message = Errors.INVALID_REQUEST, f"Duplicate resource {name!r} in the request"
            elif rtype == cfm.CONFIG_RESOURCE_BROKER:
                if name != "" and not (name.isdigit() and int(name) >= 0):
                    error, message = Errors.INVALID_REQUEST, f'Invalid broker id {name!r}: a broker id or ""'
                else:
                    result = change(i, self.state.broker_configs.get(name, {}), True)
                    if isinstance(result, tuple):
                        error, message = result
                    elif not validate_only and result != self.state.broker_configs.get(name, {}):
                        self._set_broker_configs(name, result)
            elif rtype != cfm.CONFIG_RESOURCE_TOPIC:
                error, message = Errors.INVALID_REQUEST, f"Unexpected resource type {rtype}"
            elif topic is None:
                error, message = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name!r} does not exist"
            else:
                result = change(i, topic.configs, False)
                if isinstance(result, tuple):
                    error, message = result
                elif not validate_only and result != topic.configs:
                    self._set_topic_configs(topic, result)
            out.append(
                cfm.AlterConfigsResourceResponse(
                    error_code=int(error),
                    error_message=message or None,
                    resource_type=rtype,
                    resource_name=name,
                )
            )
        return out

    def _set_topic_configs(self, topic: TopicState, configs: dict[str, str]) -> None:
        previous = topic.configs
        topic.configs = dict(configs)
        self._dirty = True
        self._emit("topic_configs_changed", topic=topic.name, configs=dict(configs), previous=dict(previous))
        self._batch.add_update_metadata(self.live_brokers(), [(topic.name, i) for i in topic.partitions])
        if self.unclean_enabled(topic.name):
            self._elect_offline_partitions("unclean_leader_election_enabled")

    def _set_broker_configs(self, name: str, configs: dict[str, str]) -> None:
        previous = self.state.broker_configs.get(name, {})
        if configs:
            self.state.broker_configs[name] = dict(configs)
        else:
            self.state.broker_configs.pop(name, None)
        self._dirty = True
        self._emit(
            "broker_configs_changed", resource_name=name, configs=dict(configs), previous=dict(previous)
        )
        self._batch.add_update_metadata(self.live_brokers(), [])

    def describe_cluster(self, listener: str | None = None) -> cm.DescribeClusterResponse:
        return describe_cluster_response(self.state, self.controller_id, listener)

    # ------------------------------------------------------------------------ reassignments (45, 46)

    def _apply_replica_change(
        self, tp: TopicPartition, p: PartitionState, change: ra.ReplicaChange, reason: str
    ) -> None:
        """New replicas (and ISR, leader) for ``tp``: LEADER_AND_ISR to the live replicas, STOP_REPLICA with
        deletion to the brokers whose replicas go (when they return, if they are down)."""
        p.replicas = list(change.replicas)
        p.adding_replicas = list(change.adding)
        p.removing_replicas = list(change.removing)
        self._apply(tp, p, change.leader, change.isr, reason)
        self._emit(
            "partition_reassignment",
            topic=tp[0],
            partition=tp[1],
            replicas=list(p.replicas),
            adding_replicas=list(p.adding_replicas),
            removing_replicas=list(p.removing_replicas),
            reason=reason,
        )
        live = self.live_brokers()
        for r in change.stopped:
            if r in live:
                self._batch.add_stop_replica(r, tp, EPOCH_DURING_DELETE, True)
            else:
                self.state.pending_deletions.setdefault(r, []).append(tp)

    def _maybe_complete_reassignment(self, tp: TopicPartition, p: PartitionState) -> None:
        done = ra.maybe_complete(ra.ongoing(p), self.eligible_brokers())
        if done is not None:
            self._apply_replica_change(tp, p, done, "reassignment_completed")

    def alter_partition_reassignments(
        self, req: am.AlterPartitionReassignmentsRequest
    ) -> am.AlterPartitionReassignmentsResponse:
        """KRaft's ``alterPartitionReassignments``: each partition starts, replaces or (null replicas)
        cancels a reassignment (``controller/reassignment.py``)."""
        registered = set(self.state.brokers)
        acceptable = self.eligible_brokers()
        out: list[am.ReassignableTopicResponse] = []
        for t in req.topics:
            topic = self.state.topics.get(t.name)
            results: list[am.ReassignablePartitionResponse] = []
            for rp in t.partitions:
                tp = (t.name, rp.partition_index)
                p = None if topic is None else topic.partitions.get(rp.partition_index)
                error: tuple[Errors, str | None] | None = None
                if p is None:
                    error = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {t.name}-{tp[1]}."
                elif rp.replicas is None:
                    if not p.adding_replicas and not p.removing_replicas:
                        error = Errors.NO_REASSIGNMENT_IN_PROGRESS, None
                    else:
                        self._apply_replica_change(
                            tp, p, ra.cancel_reassignment(p, acceptable), "reassignment_cancelled"
                        )
                else:
                    target = list(rp.replicas)
                    error = ra.validate_target(
                        target, registered, len(ra.original_replicas(p)), req.allow_replication_factor_change
                    )
                    if error is None and (target != p.replicas or p.adding_replicas or p.removing_replicas):
                        if target == ra.original_replicas(p):
                            change = ra.cancel_reassignment(p, acceptable)
                        else:
                            change = ra.start_reassignment(p, target, acceptable)
                        reason = (
                            "reassignment_completed"
                            if not change.adding and not change.removing
                            else ("reassignment_started")
                        )
                        self._apply_replica_change(tp, p, change, reason)
                code, message = (Errors.NONE, None) if error is None else error
                results.append(
                    am.ReassignablePartitionResponse(
                        partition_index=rp.partition_index, error_code=int(code), error_message=message
                    )
                )
            out.append(am.ReassignableTopicResponse(name=t.name, partitions=results))
        return am.AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=req.allow_replication_factor_change, responses=out
        )

    def list_partition_reassignments(
        self, req: am.ListPartitionReassignmentsRequest
    ) -> am.ListPartitionReassignmentsResponse:
        """The ongoing reassignments of the partitions named (null: all); unknown ones are left out."""
        if req.topics is None:
            named = [(name, sorted(t.partitions)) for name, t in sorted(self.state.topics.items())]
        else:
            named = [(t.name, list(t.partition_indexes)) for t in req.topics]
        topics: list[am.OngoingTopicReassignment] = []
        for name, indexes in named:
            topic = self.state.topics.get(name)
            if topic is None:
                continue
            ongoing = [
                am.OngoingPartitionReassignment(
                    partition_index=i,
                    replicas=list(p.replicas),
                    adding_replicas=list(p.adding_replicas),
                    removing_replicas=list(p.removing_replicas),
                )
                for i in indexes
                if (p := topic.partitions.get(i)) is not None and (p.adding_replicas or p.removing_replicas)
            ]
            if ongoing:
                topics.append(am.OngoingTopicReassignment(name=name, partitions=ongoing))
        return am.ListPartitionReassignmentsResponse(topics=topics)

    # ------------------------------------------------------------------------ ELECT_LEADERS (43)

    def elect_leaders(self, req: am.ElectLeadersRequest) -> am.ElectLeadersResponse:
        """KRaft's ``electLeaders``: each named partition (null: every partition, leaving out those that
        need no election) gets a preferred or unclean election (``controller/leader_election.py``)."""
        every = req.topic_partitions is None
        if req.topic_partitions is None:
            named = [(name, sorted(t.partitions)) for name, t in sorted(self.state.topics.items())]
        else:
            merged: dict[str, list[int]] = {}
            for tps in req.topic_partitions:
                merged.setdefault(tps.topic, [])
                merged[tps.topic] += [i for i in tps.partitions if i not in merged[tps.topic]]
            named = list(merged.items())
        acceptable = self.eligible_brokers()
        unclean = req.election_type != am.ELECTION_PREFERRED
        reason = "unclean_leader_election" if unclean else "preferred_leader_election"
        results: list[am.ElectLeadersReplicaElectionResult] = []
        for name, indexes in named:
            topic = self.state.topics.get(name)
            out: list[am.ElectLeadersPartitionResult] = []
            for index in indexes:
                p = None if topic is None else topic.partitions.get(index)
                if p is None:
                    what = (
                        f"No such topic as {name}"
                        if topic is None
                        else f"No such partition as {name}-{index}"
                    )
                    out.append(
                        am.ElectLeadersPartitionResult(
                            partition_id=index,
                            error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                            error_message=what,
                        )
                    )
                    continue
                change = elect_leader(p, req.election_type, acceptable)
                if isinstance(change, tuple):
                    if every and change[0] == Errors.ELECTION_NOT_NEEDED:
                        continue
                    out.append(
                        am.ElectLeadersPartitionResult(
                            partition_id=index, error_code=int(change[0]), error_message=change[1]
                        )
                    )
                    continue
                self._apply((name, index), p, change.leader, change.isr, reason, change.unclean)
                out.append(am.ElectLeadersPartitionResult(partition_id=index))
            if out or not every:
                results.append(am.ElectLeadersReplicaElectionResult(topic=name, partition_result=out))
        return am.ElectLeadersResponse(replica_election_results=results)


__all__ = ["ControllerCore", "ControllerSettings", "Effects", "JournalEvent"]


def _create_topics_refused(
    req: cm.CreateTopicsRequest, error: Errors, message: str
) -> cm.CreateTopicsResponse:
    """A CreateTopics refused as a whole: every topic the request names gets the same answer (Kafka's
    CreateTopicsRequest.getErrorResponse)."""
    return cm.CreateTopicsResponse(
        topics=[
            cm.CreateTopicsResponseTopic(name=t.name, error_code=int(error), error_message=message)
            for t in req.topics
        ]
    )


def _topic_config_entry(
    key: str, own: dict[str, str], static: dict[str, str]
) -> cm.DescribeConfigsResponseConfig | None:
    """One topic config as DescribeConfigs lists it; None for a key isrsim does not know."""
    if key in own:
        return cm.DescribeConfigsResponseConfig(
            name=key, value=own[key], config_source=cm.CONFIG_SOURCE_TOPIC
        )
    default = KAFKA_TOPIC_CONFIG_DEFAULTS.get(key)
    if default is None:
        return None
    value = static.get(key, default)
    if value != default:
        return cm.DescribeConfigsResponseConfig(
            name=key, value=value, config_source=cm.CONFIG_SOURCE_STATIC_BROKER
        )
    return cm.DescribeConfigsResponseConfig(
        name=key, value=value, is_default=True, config_source=cm.CONFIG_SOURCE_DEFAULT
    )
