"""``KafkaController``: the controller process (trio shell around :class:`ControllerCore`).

It listens with the broker's ``SocketServer`` / ``RequestChannel`` / ``RequestHandlerPool`` and answers
BROKER_REGISTRATION, BROKER_HEARTBEAT, ALTER_PARTITION, CONTROLLED_SHUTDOWN, CREATE_TOPICS,
DELETE_TOPICS, METADATA, DESCRIBE_CLUSTER and API_VERSIONS through :class:`ControllerApis`. After every
call into the core it applies the core's effects in this order: save the state (atomically), write the
journal events, reset and fill the per-broker send queues of the :class:`ControllerChannelManager`. A
timer task fences brokers whose heartbeats stopped.

Everything runs on one trio thread and no ``await`` separates a core call from taking its effects, so
the core needs no locks. In a quorum the effects are then a metadata record first and are acted on once it
is committed, for as long as that takes while this controller leads its epoch, and always in the order of
the calls (see :meth:`KafkaController.commit_effects`).
"""

from __future__ import annotations

import logging
import random
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from controller.channel_manager import ControllerChannelManager
from controller.config import ControllerConfig
from controller.controller_metrics import ControllerMetrics
from controller.core import ControllerCore, ControllerSettings, Effects
from controller.describe import metadata_response
from controller.quorum import RaftManager
from controller.request_batch import OutboundRequest
from controller.security_control import SecurityControl
from controller.state import ClusterState, save_state, start_new_epoch
from protocol import config_messages as cfm
from protocol import environment
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.api_specs import SPECS, Node, check_handlers, handled_by, node_api_versions
from protocol.common import monotonic_ms, wall_clock_ms
from protocol.errors import Errors, InvalidRequestError, KafkaError
from protocol.fault_injector import FaultInjector, current_faults
from protocol.faults import CONTROLLER
from protocol.file_names import EVENTS_FILE
from protocol.record_codec import preload_fast_scan
from protocol.schema import from_body, to_body
from protocol.security import current_client_security
from server.auth_helper import AuthHelper, ClusterAuthorizationError, build_authorizer, cluster_operation_of
from server.journal import Journal
from server.metrics.http_server import MetricsHttpServer
from server.network import SocketServer
from server.request_channel import Request, RequestChannel, RequestHandlerPool, error_body
from server.security.acl import AclOperation, ResourceType
from server.security.listener_security import (
    inter_broker_client_security,
    listener_securities,
    load_credential_store,
)
from server.security.security_metadata import SecurityMetadata

log = logging.getLogger(__name__)

# The APIs whose requests a controller's metrics count (Kafka's RequestMetrics): those it answers itself
# (protocol/api_specs.py), the quorum's aside.
CONTROLLER_APIS: tuple[ApiKeys, ...] = tuple(sorted(handled_by(Node.CONTROLLER)))

# A controller's handler: (request, its checked body, the core, now in ms) -> the response, or an
# ``AnswerOnceReplicasKnow``.
ControllerHandler = Callable[[Request, Any, ControllerCore, int], Any]


@dataclass(frozen=True, slots=True)
class AnswerOnceReplicasKnow:
    """A response sent once the replicas know of the change (LEADER_AND_ISR / STOP_REPLICA sent), or after
    ``wait_s`` (the request's timeout), as Kafka's CREATE_TOPICS / DELETE_TOPICS / CREATE_PARTITIONS."""

    response: Any
    wait_s: float


# A decision waits for the quorum to commit it for as long as this controller leads its epoch; every this
# many seconds of waiting it logs a warning.
COMMIT_TIMEOUT_S = 5.0
# What a voter's raft manager answers, queued apart from the rest.
QUORUM_REQUEST_KEYS = frozenset(
    int(k) for k in handled_by(Node.CONTROLLER, quorum=True) - set(CONTROLLER_APIS)
)


class MetadataAppendError(KafkaError):
    """A decision's metadata record could not be appended; the controller went back to its committed
    state. The request that made it is answered UNKNOWN_SERVER_ERROR, as Kafka answers a controller fault."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.UNKNOWN_SERVER_ERROR, message)


@dataclass(eq=False)
class PendingEffects:
    """A call's effects in a quorum, waiting for the metadata record they depend on to be committed:
    ``offset`` is the last offset to commit first (-1: none), ``ticket`` their place in the order in which
    effects are acted on (the order of the calls, hence of their records)."""

    core: ControllerCore
    effects: Effects
    epoch: int
    offset: int
    ticket: int
    decisions: list[str]
    security: dict[str, Any] | None


class QuorumRequestChannel(RequestChannel):
    """The request queue of a quorum voter: the quorum's APIs go to a queue of their own (``raft``)."""

    def __init__(self, queued_max_requests: int) -> None:
        super().__init__(queued_max_requests)
        self.raft = RequestChannel(queued_max_requests)

    async def send_request(self, request: Request) -> None:
        if request.api_key in QUORUM_REQUEST_KEYS:
            await self.raft.send_request(request)
        else:
            await super().send_request(request)

    def close(self) -> None:
        super().close()
        self.raft.close()


class KafkaController:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        self.config = config
        self.controller_id = config.node_id
        self.clock_ms = clock_ms
        self.rng = rng or environment.new_random(f"controller-{config.node_id}")
        self.directory = config.directory
        self.bound_port: int | None = None
        self.started = trio.Event()
        self._stop = trio.Event()
        self.core: ControllerCore | None = None
        self.journal: Journal | None = None
        # The quorum (controller.quorum.voters set): this controller is active only while it leads it.
        self.voters = config.quorum_voters
        self.raft: RaftManager | None = None
        self.active_epoch = -1
        self._nursery: trio.Nursery | None = None
        # Waiting for commits (docs/controller.md): a warning every ``commit_timeout_s`` while a decision
        # waits; the last offset this controller appended in its epoch; the order in which effects are
        # acted on (tickets handed out when the record is appended; the first not yet acted on or given up).
        self.commit_timeout_s = commit_timeout_s
        self._last_appended = -1
        self._next_ticket = 0
        self._first_unresolved = 0
        self._resolved: set[int] = set()
        self._turn = trio.Event()
        self.channels = ControllerChannelManager(
            self.controller_id,
            request_timeout_s=config.get_int("controller.socket.timeout.ms") / 1000.0,
            retry_backoff_s=config.get_int("controller.retry.backoff.ms") / 1000.0,
            on_response=self._on_broker_response,
        )
        self.auth = AuthHelper(build_authorizer(config), f"controller {self.controller_id}")
        # The cluster's ACLs and SCRAM credentials, which this controller owns: loaded from
        # <metadata.log.dir>/security when it runs (docs/security.md). In a quorum this is the active
        # controller's working copy, which goes into the metadata log; what the SASL server and the
        # authorizer use is the last committed copy (``_live_security``), which is also what is saved.
        self.security: SecurityControl | None = None
        self._live_security = SecurityMetadata()
        self._taken_security: dict[str, Any] | None = None
        self.apis = ControllerApis(self)
        self.request_channel: RequestChannel = (
            QuorumRequestChannel(config.get_int("queued.max.requests"))
            if self.voters
            else RequestChannel(config.get_int("queued.max.requests"))
        )
        host, port = config.listener
        self.host = host
        # A single controller is the node "controller"; each voter of a quorum is named by its id.
        quorum = len(self.voters) > 1
        self.faults = FaultInjector(
            str(self.controller_id) if quorum else CONTROLLER,
            resolve=self._resolve_peer,
            peers=self._peers,
            voters=frozenset(str(v) for v in self.voters) if quorum else frozenset(),
        )
        self.listeners = config.listeners
        # Security (docs/security.md): the live credential store, each listener's TLS / SASL, and who the
        # controller is to the brokers (it reaches them with the protocol of its first listener).
        self.credential_store = load_credential_store(self.directory)
        protocols = config.protocols
        listener_security = listener_securities(config.values, protocols, [e.name for e in self.listeners])
        self.client_security = inter_broker_client_security(config.values, protocols[self.listeners[0].name])
        self.socket_server = SocketServer(
            host=host,
            port=port,
            listeners=[(e.name, e.host, e.port) for e in self.listeners],
            channel=self.request_channel,
            max_request_bytes=config.get_int("socket.request.max.bytes"),
            supported=self.apis.supported,
            name=f"controller {self.controller_id}",
            faults=self.faults,
            security=listener_security,
            credential_store=self.credential_store,
            kafka_supported=self.apis.kafka_supported,
        )
        # The socket server adds SASL's Kafka versions: ApiVersions lists what it serves.
        self.apis.kafka_supported = self.socket_server.kafka_supported
        self.socket_server.net_faults_check = self.auth.net_faults_check
        # Protocol-level fault rules' hits go to the controller's journal as `rule_hit` (docs/faults.md).
        self.faults.on_rule_hit = self._journal_rule_hit
        self.metrics = ControllerMetrics(
            CONTROLLER_APIS, lambda: None if self.core is None else self.core.state
        )
        self.metrics_server: MetricsHttpServer | None = None
        metrics_port = config.get_int("metrics.port")
        if metrics_port > 0:
            self.metrics_server = MetricsHttpServer(
                self.metrics.registry, host, metrics_port, f"controller {self.controller_id}"
            )
        self.metrics.watch_socket_server(self.socket_server, self.request_channel)
        self.handler_pool = RequestHandlerPool(
            self.request_channel,
            self.metrics.requests.instrument(self.apis.handle),
            config.get_int("num.io.threads"),
            f"controller {self.controller_id}",
        )
        # The quorum's own requests (VOTE, BEGIN/END_QUORUM_EPOCH, the voters' FETCH, DESCRIBE_QUORUM) have
        # handlers of their own, as Kafka's raft requests go to its raft I/O thread: a controller API waits
        # for its decision to be committed while holding a handler, and the commit needs the followers'
        # FETCH answered, so sharing the handlers would deadlock once every one of them was waiting.
        self.raft_handler_pool: RequestHandlerPool | None = None
        if isinstance(self.request_channel, QuorumRequestChannel):
            self.raft_handler_pool = RequestHandlerPool(
                self.request_channel.raft,
                self.apis.handle,
                len(self.voters) + 2,
                f"controller {self.controller_id} quorum",
            )

    def stop(self) -> None:
        self._stop.set()

    def answer_listener(self, request: Request) -> str | None:
        """The listener METADATA / DESCRIBE_CLUSTER answer on: the one the request came in on when the
        controller has several (Kafka's rule), else None (brokers' inter-broker addresses, as ever)."""
        return request.listener_name if len(self.listeners) > 1 else None

    def _peers(self) -> list[tuple[str, str, int]]:
        voters = [(str(v), h, p) for v, (h, p) in sorted(self.voters.items()) if v != self.controller_id]
        if self.core is None:
            return voters
        return voters + [(str(b), reg.host, reg.port) for b, reg in sorted(self.core.state.brokers.items())]

    def _journal_rule_hit(self, record: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.emit("rule_hit", **record)

    def _resolve_peer(self, host: str, port: int) -> str | None:
        for node, h, p in self._peers():
            if (h, p) == (host, port):
                return node
        return None

    # ------------------------------------------------------------------------------------ running

    def _make_core(self, state: ClusterState) -> ControllerCore:
        core = ControllerCore(
            state,
            ControllerSettings(
                controller_id=self.controller_id,
                session_timeout_ms=self.config.get_int("broker.session.timeout.ms"),
                topic_defaults=self.config.topic_defaults,
            ),
            now_ms=self.clock_ms(),
            rng=self.rng,
        )
        security = self._require_security().metadata
        if security.version > 0:
            core.security = security.to_message()
        return core

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        for unknown in self.config.unknown_keys:
            log.warning("controller %d: unknown configuration key %r ignored", self.controller_id, unknown)
        state: ClusterState | None = None
        if not self.voters:
            state = start_new_epoch(self.directory, self.config.cluster_id)
        self._load_security()
        journal = self.journal = Journal(
            self.directory / EVENTS_FILE,
            self.controller_id,
            owner_field="controller_id",
            clock_ms=wall_clock_ms,
        )
        if state is not None:
            self.core = self._make_core(state)
        else:
            self.raft = RaftManager(
                self.controller_id,
                self.voters,
                self.directory,
                self.config.quorum_config,
                cluster_id=self.config.cluster_id,
                emit=lambda name, fields: journal.emit(name, **fields),
                clock_ms=self.clock_ms,
                rng=self.rng,
                listener_name=self.listeners[0].name,
            )
        # The controller channel's connects (tasks started below inherit this) see network faults.
        current_faults.set(self.faults)
        current_client_security.set(self.client_security)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.bound_port = await nursery.start(self.socket_server.serve)
                await nursery.start(self.channels.run)
                nursery.start_soon(self.handler_pool.run)
                if self.raft_handler_pool is not None:
                    nursery.start_soon(self.raft_handler_pool.run)
                nursery.start_soon(self._fence_expired_brokers)
                if self.raft is not None:
                    await nursery.start(self.raft.run)
                    nursery.start_soon(self._follow_quorum)
                if self.metrics_server is not None:
                    await nursery.start(self.metrics_server.serve)
                advertised = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
                epoch = state.controller_epoch if state is not None else self._require_raft().client.epoch
                self.journal.emit(
                    "controller_started",
                    controller_epoch=epoch,
                    host=advertised,
                    port=self.bound_port,
                    pid=environment.process_id(),
                    cluster_id=self.config.cluster_id,
                    metadata_dir=str(self.directory),
                    voters=sorted(self.voters),
                )
                log.info(
                    "controller %d started on %s:%d, controller epoch %d%s",
                    self.controller_id,
                    advertised,
                    self.bound_port,
                    epoch,
                    f", one of the quorum {sorted(self.voters)}" if self.voters else "",
                )
                self.started.set()
                task_status.started(self.bound_port)
                await self._stop.wait()
                log.info("controller %d stopping", self.controller_id)
                if self.raft is not None:
                    await self.raft.resign()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            if state is not None:
                save_state(self.directory, state)
            final_epoch = state.controller_epoch if state is not None else self.active_epoch
            if self.raft is not None:
                self.raft.close()
            self.journal.emit("controller_stopped", controller_epoch=final_epoch)
            self.journal.close()
        log.info("controller %d stopped cleanly", self.controller_id)

    def _require_raft(self) -> RaftManager:
        assert self.raft is not None, "the controller runs without a quorum"
        return self.raft

    async def _follow_quorum(self) -> None:
        """Active while this voter leads the quorum and has committed its epoch's first entry: the state is
        then rebuilt from the committed metadata log and every live broker is sent its full state."""
        raft = self._require_raft()
        while True:
            self._take_committed_security()
            if raft.is_active():
                if self.core is None or self.active_epoch != raft.client.epoch:
                    self._deactivate()
                    self._activate()
                    nursery = self._nursery
                    if nursery is not None:
                        nursery.start_soon(self._resync)
            elif self.core is not None:
                self._deactivate()
            await raft.wait_changed(0.2)

    def _activate(self) -> None:
        raft = self._require_raft()
        if raft.latest_state is not None:
            state = ClusterState.from_json(raft.latest_state)
        else:
            state = ClusterState(cluster_id=self.config.cluster_id)
        # The ACLs and credentials are the log's too: the last committed copy, else (a log that never carried
        # any) the copy this voter started with.
        self._take_committed_security()
        self._require_security().metadata = self._live_security.copy()
        epoch = raft.client.epoch
        state.controller_epoch = epoch
        self.active_epoch = epoch
        self._last_appended = -1
        self.core = self._make_core(state)
        self.core.state_record_bytes = raft.latest_state_bytes
        log.info(
            "controller %d is the active controller, epoch %d (state from metadata offset %d: %d broker(s), "
            "%d topic(s))",
            self.controller_id,
            epoch,
            raft.latest_state_offset,
            len(state.brokers),
            len(state.topics),
        )
        if self.journal is not None:
            self.journal.emit(
                "controller_activated",
                controller_epoch=epoch,
                metadata_offset=raft.latest_state_offset,
                high_watermark=raft.client.high_watermark,
            )

    def _deactivate(self) -> None:
        core = self.core
        if core is None:
            return
        self.core = None
        log.warning(
            "controller %d is no longer the active controller (epoch %d)",
            self.controller_id,
            self.active_epoch,
        )
        if self.raft is not None:
            # Decisions still waiting for their commit give up now: the in-memory state they came from is
            # gone, and the next active controller rebuilds from the committed log.
            self.raft.notify_waiters()
        if self.journal is not None:
            self.journal.emit("controller_deactivated", controller_epoch=self.active_epoch)
        for broker_id, reg in sorted(core.state.brokers.items()):
            self.channels.reset(broker_id, reg.host, reg.port)

    def _on_broker_response(self, request: OutboundRequest, body: dict[str, Any]) -> None:
        """A broker answered STALE_CONTROLLER_EPOCH (11): it has accepted a newer controller epoch, so this
        controller was deposed (ZooKeeper-era Kafka's ``ControllerMovedException``). It journals the
        refusal and, if it still thinks it is active in that epoch, stops acting at once and resigns its
        quorum leadership; the quorum then names it the new leader and epoch."""
        if body.get("error_code") != Errors.STALE_CONTROLLER_EPOCH:
            return
        epoch = int(getattr(request.body, "controller_epoch", -1))
        log.warning(
            "controller %d: broker %d refused %s with controller epoch %d (STALE_CONTROLLER_EPOCH): a newer "
            "controller exists",
            self.controller_id,
            request.broker_id,
            request.api_key.name,
            epoch,
        )
        if self.journal is not None:
            self.journal.emit(
                "stale_controller_epoch",
                broker_id=request.broker_id,
                api_key=int(request.api_key),
                api=request.api_key.name,
                controller_epoch=epoch,
                error_code=int(Errors.STALE_CONTROLLER_EPOCH),
            )
        if self.raft is not None and self.core is not None and epoch == self.active_epoch:
            self._deactivate()
            self.raft.step_down(epoch)

    async def _resync(self) -> None:
        core = self.core
        if core is None:
            return
        core.resync_all()
        await self.commit_effects()

    async def _fence_expired_brokers(self) -> None:
        period = min(0.25, self.config.get_int("broker.session.timeout.ms") / 10000.0)
        while True:
            await trio.sleep(period)
            core = self.core
            if core is None:
                continue
            for broker_id in core.tick(self.clock_ms()):
                log.warning(
                    "controller %d fenced broker %d: no heartbeat for broker.session.timeout.ms=%d",
                    self.controller_id,
                    broker_id,
                    core.settings.session_timeout_ms,
                )
            self.commit_effects_soon()

    def _load_security(self) -> SecurityMetadata:
        metadata = SecurityMetadata.load(SecurityMetadata.directory_of(self.directory))
        self.credential_store.replace_all(metadata.credentials)
        if self.voters:
            # A voter's files hold the last committed copy it saw: it authenticates with them until the log
            # says otherwise. Its changes are acted on once committed (_apply_committed_security).
            self._live_security = metadata.copy()
        else:
            metadata.credentials = self.credential_store  # one store: the SASL server sees every change
        if self.auth.authorizer is not None:
            self.auth.authorizer.replace_acls(metadata.acls)
        self.security = SecurityControl(metadata)
        log.info(
            "controller %d: security metadata version %d (%d ACL(s), %d user(s)); authorizer %s",
            self.controller_id,
            metadata.version,
            len(metadata.acls),
            len(metadata.credentials),
            "on" if self.auth.enabled else "off",
        )
        return metadata

    def security_changed(self) -> None:
        """After an ACL or credential change: saved first (0600), then the authorizer's ACLs, then every
        live broker is sent the new copy. In a quorum the change is first a metadata record: it is saved and
        used, and the brokers get it, once the quorum has committed it (:meth:`commit_effects`)."""
        security = self._require_security()
        metadata = security.metadata
        if self.raft is not None:
            self._require_core().security_changed(metadata.to_message(), record=True)
            return
        metadata.save(SecurityMetadata.directory_of(self.directory))
        if self.auth.authorizer is not None:
            self.auth.authorizer.replace_acls(metadata.acls)
        self._require_core().security_changed(metadata.to_message())
        if self.journal is not None:
            self.journal.emit(
                "security_metadata_changed",
                version=metadata.version,
                acls=len(metadata.acls),
                users=len(metadata.credentials),
            )

    def _take_committed_security(self) -> None:
        """A voter acts on the ACLs and credentials of the latest committed metadata record; an inactive one
        also makes them its working copy, from which it starts if it becomes active."""
        raw = self._require_raft().latest_security
        if raw is None or raw is self._taken_security:
            return
        self._taken_security = raw
        try:
            committed = SecurityMetadata.from_json(raw)
        except ValueError as exc:
            log.error("controller %d: committed security metadata unreadable: %s", self.controller_id, exc)
            return
        if raw != self._live_security.to_json():
            self._apply_committed_security(committed)
        if self.core is None and self.security is not None:
            self.security.metadata = committed.copy()

    def _apply_committed_security(self, committed: SecurityMetadata) -> None:
        """A committed copy of the ACLs and credentials: saved (0600), then used by the SASL server and the
        authorizer."""
        committed.save(SecurityMetadata.directory_of(self.directory))
        self.credential_store.replace_all(committed.credentials)
        if self.auth.authorizer is not None:
            self.auth.authorizer.replace_acls(committed.acls)
        self._live_security = committed
        if self.journal is not None:
            self.journal.emit(
                "security_metadata_changed",
                version=committed.version,
                acls=len(committed.acls),
                users=len(committed.credentials),
            )

    def _require_security(self) -> SecurityControl:
        assert self.security is not None, "the controller is not running"
        return self.security

    def _require_core(self) -> ControllerCore:
        assert self.core is not None, "the controller is not running"
        return self.core

    def apply_effects(self) -> list[tuple[OutboundRequest, trio.Event]]:
        """Saves, journals and queues what the core's last calls produced; returns the queued requests
        with the events set when they are answered."""
        core = self._require_core()
        effects = core.drain()
        if effects.dirty:
            save_state(self.directory, core.state)
        return self._apply(core, effects)

    async def commit_effects(self) -> list[tuple[OutboundRequest, trio.Event]] | None:
        """With a quorum: the state after the core's last calls becomes a metadata record, and nothing is
        journaled or sent to a broker until the quorum has committed it, however long that takes while this
        controller leads the epoch. None if this controller lost its leadership (or stopped being active)
        first: the next active controller rebuilds the state from the committed log and resends it.
        Without a quorum: :meth:`apply_effects`."""
        if self.raft is None:
            return self.apply_effects()
        core = self.core
        if core is None:
            return None
        try:
            pending = self.submit_effects(core.drain())
        except MetadataAppendError:
            return None
        if pending is None:
            return None
        return await self.await_effects(pending)

    def commit_effects_soon(self) -> None:
        """:meth:`commit_effects` without waiting here: acted on at once if nothing is left to commit, else
        by a task of its own once committed (the fencing timer goes on meanwhile)."""
        if self.raft is None:
            self.apply_effects()
            return
        core = self.core
        if core is None:
            return
        effects = core.drain()
        if not (effects.dirty or effects.requests or effects.events or effects.resets):
            return
        try:
            pending = self.submit_effects(effects)
        except MetadataAppendError:
            return
        if pending is None:
            return
        if self.effects_ready(pending):
            self.act_on(pending)
        elif self._nursery is not None:
            self._nursery.start_soon(self.await_effects, pending)
        else:
            self._resolve(pending.ticket)

    def submit_effects(self, effects: Effects) -> PendingEffects | None:
        """In a quorum, the first half of :meth:`commit_effects`, with no ``await`` after the core's call:
        a state change is appended to the metadata log, and the effects get their place in the order in
        which they will be acted on. Effects that change nothing (a METADATA answer, a resend) still wait
        for every record appended before them: what they carry was read from the uncommitted state (Kafka's
        read-only controller events wait for the highest pending offset the same way). None if this voter
        no longer leads."""
        raft = self._require_raft()
        core = self._require_core()
        epoch = self.active_epoch
        decisions: list[str] = []
        security: dict[str, Any] | None = None
        offset = self._last_appended
        if effects.dirty:
            decisions = [name for name, _ in effects.events]
            working = self._require_security().metadata
            security = working.to_json() if working.version > 0 else None
            if working.version != self._live_security.version:
                decisions.append("security_metadata_changed")
            decisions = decisions or ["state"]
            try:
                offsets = raft.append_state(decisions, core.state.to_json(), security)
            except KafkaError as exc:
                # The metadata log refused the record (it would pass the log's batch limit): the in-memory
                # state it came from is dropped, and this voter goes back to its last committed state
                # (Kafka's controller reverts to the last committed offset after an unexpected fault).
                log.error(
                    "controller %d: decisions %s could not be written to the metadata log: %s; back to the "
                    "last committed state",
                    self.controller_id,
                    decisions,
                    exc.message,
                )
                self._discard_uncommitted_security(core)
                self._deactivate()
                raise MetadataAppendError(exc.message) from exc
            core.state_record_bytes = raft.appended_state_bytes
            if offsets is None:
                log.warning(
                    "controller %d: decisions %s not appended: this voter no longer leads epoch %d; they are "
                    "not acted on",
                    self.controller_id,
                    decisions,
                    epoch,
                )
                self._discard_uncommitted_security(core)
                return None
            offset = self._last_appended = offsets[1]
        ticket = self._next_ticket
        self._next_ticket += 1
        return PendingEffects(core, effects, epoch, offset, ticket, decisions, security)

    def _still_current(self, pending: PendingEffects) -> bool:
        """The core that made the effects is still the active one, leading the epoch it was made in."""
        return self.core is pending.core and self.raft is not None and self.raft.leads(pending.epoch)

    def effects_ready(self, pending: PendingEffects) -> bool:
        """Everything the effects wait for is committed and every earlier call's effects were dealt with."""
        raft = self._require_raft()
        return (
            self._first_unresolved == pending.ticket
            and (pending.offset < 0 or raft.client.high_watermark > pending.offset)
            and self._still_current(pending)
        )

    def act_on(self, pending: PendingEffects) -> list[tuple[OutboundRequest, trio.Event]]:
        """Acts on committed effects whose turn it is (:meth:`effects_ready`)."""
        try:
            security = pending.security
            if security is not None and security != self._live_security.to_json():
                self._apply_committed_security(SecurityMetadata.from_json(security))
            return self._apply(pending.core, pending.effects)
        finally:
            self._resolve(pending.ticket)

    async def await_effects(self, pending: PendingEffects) -> list[tuple[OutboundRequest, trio.Event]] | None:
        """The second half of :meth:`commit_effects`: waits until what the effects depend on is committed
        (a warning every ``commit_timeout_s`` meanwhile), then until every earlier call's effects were
        acted on, and acts on them; None, acting on nothing, once this voter no longer leads the epoch or
        the core was replaced (the next active controller rebuilds from the committed log and resends)."""
        raft = self._require_raft()
        try:
            waited = 0.0
            while pending.offset >= 0:
                committed = await raft.wait_committed(
                    pending.offset,
                    pending.epoch,
                    self.commit_timeout_s,
                    still_wanted=lambda: self.core is pending.core,
                )
                if committed:
                    break
                if committed is not None:
                    if pending.decisions:
                        log.warning(
                            "controller %d: decisions %s (metadata offset %d) were not committed while this "
                            "controller led epoch %d; they are not acted on",
                            self.controller_id,
                            pending.decisions,
                            pending.offset,
                            pending.epoch,
                        )
                    if self.core is None or self.core is pending.core:
                        self._discard_uncommitted_security(pending.core)
                    return None
                waited += self.commit_timeout_s
                if pending.decisions:
                    log.warning(
                        "controller %d: decisions %s (metadata offset %d, epoch %d) not committed after "
                        "%.1f s; they wait for the quorum while this controller leads the epoch",
                        self.controller_id,
                        pending.decisions,
                        pending.offset,
                        pending.epoch,
                        waited,
                    )
            while self._first_unresolved != pending.ticket:
                await self._turn.wait()
            if not self._still_current(pending):
                return None
            return self.act_on(pending)
        finally:
            self._resolve(pending.ticket)

    def _resolve(self, ticket: int) -> None:
        """The effects with ``ticket`` were acted on or given up: the next ones may go."""
        if ticket < self._first_unresolved:
            return
        self._resolved.add(ticket)
        while self._first_unresolved in self._resolved:
            self._resolved.discard(self._first_unresolved)
            self._first_unresolved += 1
        self._turn.set()
        self._turn = trio.Event()

    def _discard_uncommitted_security(self, core: ControllerCore) -> None:
        """An ACL or credential change that was not committed is forgotten: back to the committed copy."""
        security = self._require_security()
        if security.metadata.version == self._live_security.version:
            return
        security.metadata = self._live_security.copy()
        core.security = security.metadata.to_message() if security.metadata.version > 0 else None

    def _apply(self, core: ControllerCore, effects: Effects) -> list[tuple[OutboundRequest, trio.Event]]:
        if self.journal is not None:
            for name, fields in effects.events:
                self.journal.emit(name, **fields)
        self.metrics.on_events(effects.events)
        for broker_id in effects.resets:
            reg = core.state.brokers[broker_id]
            self.channels.reset(broker_id, reg.host, reg.port)
        done: list[tuple[OutboundRequest, trio.Event]] = []
        for request in effects.requests:
            reg = core.state.brokers[request.broker_id]
            done.append((request, self.channels.enqueue(request, reg.host, reg.port)))
        return done


class ControllerApis:
    """Validates request bodies and dispatches them to the core (the controller's ``KafkaApis``)."""

    def __init__(self, controller: KafkaController) -> None:
        self.controller = controller
        # A voter of a quorum serves the quorum's APIs too (its raft manager answers them).
        quorum = bool(controller.voters)
        # What API_VERSIONS lists (protocol/api_specs.py); in Kafka's encoding (docs/clients.md) the APIs
        # whose spec has the controller serve them there: isrsim's own controller APIs stay msgpack only.
        self.supported: dict[int, tuple[int, int]] = node_api_versions(
            Node.CONTROLLER, kafka=False, quorum=quorum
        )
        self.kafka_supported: dict[int, tuple[int, int]] = node_api_versions(
            Node.CONTROLLER, kafka=True, quorum=quorum
        )
        # The handler of every API the controller answers itself, by key, checked against the specs.
        self._handlers: dict[int, ControllerHandler] = {
            ApiKeys.API_VERSIONS: lambda request, body, core, now: self._api_versions(request.kafka_encoding),
            ApiKeys.BROKER_REGISTRATION: lambda request, body, core, now: core.register_broker(body, now),
            ApiKeys.BROKER_HEARTBEAT: lambda request, body, core, now: core.heartbeat(body, now),
            ApiKeys.ALTER_PARTITION: lambda request, body, core, now: core.alter_partition(body),
            ApiKeys.CONTROLLED_SHUTDOWN: lambda request, body, core, now: core.controlled_shutdown(body),
            ApiKeys.ALLOCATE_PRODUCER_IDS: lambda request, body, core, now: core.allocate_producer_ids(body),
            # Like Kafka's, answered once the replicas know (or at the request's timeout).
            ApiKeys.CREATE_TOPICS: lambda request, body, core, now: AnswerOnceReplicasKnow(
                self._create_topics(request, body), body.timeout_ms / 1000.0
            ),
            ApiKeys.DELETE_TOPICS: lambda request, body, core, now: AnswerOnceReplicasKnow(
                self._delete_topics(request, body), body.timeout_ms / 1000.0
            ),
            ApiKeys.CREATE_PARTITIONS: lambda request, body, core, now: AnswerOnceReplicasKnow(
                self._create_partitions(request, body), body.timeout_ms / 1000.0
            ),
            ApiKeys.METADATA: self._metadata,
            ApiKeys.DESCRIBE_CLUSTER: lambda request, body, core, now: core.describe_cluster(
                controller.answer_listener(request)
            ),
            ApiKeys.DESCRIBE_CONFIGS: lambda request, body, core, now: self._describe_configs(request, body),
            ApiKeys.ALTER_CONFIGS: lambda request, body, core, now: self._alter_configs(
                request, ApiKeys.ALTER_CONFIGS, body
            ),
            ApiKeys.INCREMENTAL_ALTER_CONFIGS: lambda request, body, core, now: self._alter_configs(
                request, ApiKeys.INCREMENTAL_ALTER_CONFIGS, body
            ),
            ApiKeys.ELECT_LEADERS: lambda request, body, core, now: AnswerOnceReplicasKnow(
                core.elect_leaders(body), body.timeout_ms / 1000.0
            ),
            ApiKeys.ALTER_PARTITION_REASSIGNMENTS: lambda request, body, core, now: AnswerOnceReplicasKnow(
                core.alter_partition_reassignments(body), body.timeout_ms / 1000.0
            ),
            ApiKeys.LIST_PARTITION_REASSIGNMENTS: lambda request, body, core, now: (
                core.list_partition_reassignments(body)
            ),
            ApiKeys.CREATE_ACLS: self._security_api(SecurityControl.create_acls, changes=True),
            ApiKeys.DESCRIBE_ACLS: self._security_api(SecurityControl.describe_acls, changes=False),
            ApiKeys.DELETE_ACLS: self._security_api(SecurityControl.delete_acls, changes=True),
            ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS: self._security_api(
                SecurityControl.describe_scram_credentials, changes=False
            ),
            ApiKeys.ALTER_USER_SCRAM_CREDENTIALS: self._security_api(
                SecurityControl.alter_scram_credentials, changes=True
            ),
        }
        # A voter's VOTE, BEGIN/END_QUORUM_EPOCH, FETCH and DESCRIBE_QUORUM: its raft manager answers.
        quorum_apis = handled_by(Node.CONTROLLER, quorum=quorum) - handled_by(Node.CONTROLLER)
        self._quorum_handlers: dict[int, Callable[[Request], Awaitable[None]]] = dict.fromkeys(
            quorum_apis, self._raft_api
        )
        check_handlers(Node.CONTROLLER, [*self._handlers, *self._quorum_handlers], quorum=quorum)

    async def handle(self, request: Request) -> None:
        c = self.controller
        quorum_handler = self._quorum_handlers.get(request.api_key)
        if quorum_handler is not None:
            await quorum_handler(request)
            return
        handler = self._handlers.get(request.api_key)
        spec = SPECS.get(request.api_key)
        if handler is None or spec is None:
            request.complete(
                error_body(
                    Errors.UNSUPPORTED_VERSION, f"api_key {request.api_key} is not served by a controller"
                )
            )
            return
        key = spec.key
        if key == ApiKeys.API_VERSIONS:
            # Any voter answers, active or not, whatever the body (as Kafka's ApiVersions).
            request.complete(to_body(self._api_versions(request.kafka_encoding)))
            return
        if c.raft is not None and c.core is None:
            if key == ApiKeys.METADATA and request.kafka_encoding and c.raft.latest_state is not None:
                # A Kafka client's METADATA at a voter that is not active: the last committed state, as a
                # broker answers from its metadata cache (a client cannot follow NOT_CONTROLLER here).
                self._committed_metadata(request, c.raft.latest_state)
                return
            request.complete(error_body(Errors.NOT_CONTROLLER, self._not_controller_message()))
            return
        try:
            body: Any = from_body(spec.request, request.body)
        except InvalidRequestError as exc:
            log.info("controller: invalid %s request: %s", key.name, exc.message)
            request.complete(error_body(Errors.INVALID_REQUEST, exc.message))
            return
        core = c._require_core()
        now = c.clock_ms()
        operation = cluster_operation_of(spec, Node.CONTROLLER)
        try:
            if operation is not None:
                c.auth.authorize_cluster_operation(request, operation)
        except ClusterAuthorizationError as exc:
            request.complete(error_body(exc.error, exc.message))
            return
        if spec.requires_authorizer and not c.auth.enabled:
            request.complete(error_body(Errors.SECURITY_DISABLED, "No Authorizer is configured."))
            return
        response = handler(request, body, core, now)
        wait_s = 0.0
        if isinstance(response, AnswerOnceReplicasKnow):
            response, wait_s = response.response, response.wait_s
        if c.raft is None:
            await self._answer(request, response, c.apply_effects(), wait_s)
            return
        # In a quorum the answer goes once what it depends on is committed. No ``await`` between the core's
        # call and ``submit_effects``; if there is a commit to wait for, a task of its own answers (Kafka's
        # controller completes the request's future when the offset is committed), so waiting requests hold
        # no handler and the caller's own request timeout bounds how long it waits for the answer.
        try:
            pending = c.submit_effects(core.drain())
        except MetadataAppendError as exc:
            request.complete(error_body(exc.error, exc.message))
            return
        if pending is None:
            request.complete(error_body(Errors.NOT_CONTROLLER, self._not_controller_message()))
            return
        if c.effects_ready(pending):
            await self._answer(request, response, c.act_on(pending), wait_s)
            return
        nursery = c._nursery
        if nursery is None:
            await self._answer_once_committed(request, response, pending, wait_s)
        else:
            nursery.start_soon(self._answer_once_committed, request, response, pending, wait_s)

    async def _answer_once_committed(
        self, request: Request, response: Any, pending: PendingEffects, wait_s: float
    ) -> None:
        done = await self.controller.await_effects(pending)
        if done is None:
            request.complete(error_body(Errors.NOT_CONTROLLER, self._not_controller_message()))
            return
        await self._answer(request, response, done, wait_s)

    async def _answer(
        self, request: Request, response: Any, done: list[tuple[OutboundRequest, trio.Event]], wait_s: float
    ) -> None:
        if wait_s > 0:
            # Like Kafka's CREATE_TOPICS / DELETE_TOPICS, answer once the replicas know (or at the timeout).
            with trio.move_on_after(wait_s):
                for sent, event in done:
                    if sent.api_key in (ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA):
                        await event.wait()
        request.complete(response if isinstance(response, dict) else to_body(response))

    def _api_versions(self, kafka_encoding: bool = False) -> m.ApiVersionsResponse:
        supported = self.kafka_supported if kafka_encoding else self.supported
        return m.ApiVersionsResponse(
            api_keys=[
                m.ApiVersionsResponseApiKey(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(supported.items())
            ]
        )

    def _committed_metadata(self, request: Request, latest_state: dict[str, Any]) -> None:
        c = self.controller
        try:
            body: m.MetadataRequest = from_body(m.MetadataRequest, request.body)
        except InvalidRequestError as exc:
            request.complete(error_body(Errors.INVALID_REQUEST, exc.message))
            return
        state = ClusterState.from_json(latest_state)
        response = metadata_response(state, c.controller_id, body, c.answer_listener(request))
        response.topics = c.auth.filter_metadata_topics(request, body.topics is not None, response.topics)
        request.complete(_kafka_client_metadata(response, c.config.cluster_id))

    def _not_controller_message(self) -> str:
        c = self.controller
        leader = c.raft.client.leader_id if c.raft is not None else -1
        return f"controller {c.controller_id} is not the active controller" + (
            f"; the quorum leader is {leader}" if leader >= 0 and leader != c.controller_id else ""
        )

    async def _raft_api(self, request: Request) -> None:
        """VOTE, BEGIN/END_QUORUM_EPOCH, a voter's FETCH (cluster actions) and DESCRIBE_QUORUM."""
        raft = self.controller.raft
        if raft is None:  # not running yet
            request.complete(error_body(Errors.NOT_CONTROLLER, self._not_controller_message()))
            return
        spec = SPECS[request.api_key]
        key = spec.key
        try:
            operation = cluster_operation_of(spec, Node.CONTROLLER)
            if operation is not None:
                self.controller.auth.authorize_cluster_operation(request, operation)
        except ClusterAuthorizationError as exc:
            request.complete(error_body(exc.error, exc.message))
            return
        try:
            body = await raft.handle(key, request.body if isinstance(request.body, dict) else {})
        except InvalidRequestError as exc:
            log.info("controller: invalid %s request: %s", key.name, exc.message)
            request.complete(error_body(Errors.INVALID_REQUEST, exc.message))
            return
        request.complete(body)

    # ------------------------------------------------------------------ per-topic authorization

    def _create_topics(self, request: Request, req: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
        """Create on the cluster, or on each topic, else TOPIC_AUTHORIZATION_FAILED for it (Kafka's
        handleCreateTopicsRequest)."""
        auth = self.controller.auth
        if auth.authorize(request, AclOperation.CREATE, ResourceType.CLUSTER):
            return self.controller._require_core().create_topics(req)
        allowed = [
            t for t in req.topics if auth.authorize(request, AclOperation.CREATE, ResourceType.TOPIC, t.name)
        ]
        refused = {t.name for t in req.topics} - {t.name for t in allowed}
        req.topics = allowed
        response = self.controller._require_core().create_topics(req)
        response.topics.extend(
            m.CreateTopicsResponseTopic(
                name=name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Create topic {name!r}",
            )
            for name in sorted(refused)
        )
        return response

    def _delete_topics(self, request: Request, req: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
        """Delete on each topic, else TOPIC_AUTHORIZATION_FAILED for it (whether it exists or not)."""
        allowed = self.controller.auth.authorized_topics(request, AclOperation.DELETE, req.topic_names)
        refused = sorted(set(req.topic_names) - allowed)
        req.topic_names = [n for n in req.topic_names if n in allowed]
        response = self.controller._require_core().delete_topics(req)
        response.responses.extend(
            m.DeleteTopicsResponseTopic(
                name=name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Delete topic {name!r}",
            )
            for name in refused
        )
        return response

    def _create_partitions(
        self, request: Request, req: m.CreatePartitionsRequest
    ) -> m.CreatePartitionsResponse:
        """Alter on each topic, else TOPIC_AUTHORIZATION_FAILED for it (Kafka's createPartitions)."""
        names = [t.name for t in req.topics]
        allowed = self.controller.auth.authorized_topics(request, AclOperation.ALTER, names)
        refused = sorted(set(names) - allowed)
        req.topics = [t for t in req.topics if t.name in allowed]
        response = self.controller._require_core().create_partitions(req)
        response.results.extend(
            m.CreatePartitionsTopicResult(
                name=name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Alter topic {name!r}",
            )
            for name in refused
        )
        return response

    def _describe_configs(self, request: Request, req: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
        """DescribeConfigs on each topic, else TOPIC_AUTHORIZATION_FAILED for it."""
        auth = self.controller.auth
        allowed: list[m.DescribeConfigsRequestResource] = []
        refused: list[m.DescribeConfigsResponseResult] = []
        for r in req.resources:
            if r.resource_type == m.CONFIG_RESOURCE_TOPIC and not auth.authorize(
                request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, r.resource_name
            ):
                refused.append(
                    m.DescribeConfigsResponseResult(
                        error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                        error_message=f"Principal {request.principal} is not authorized to DescribeConfigs "
                        f"topic {r.resource_name!r}",
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
            else:
                allowed.append(r)
        req.resources = allowed
        response = self.controller._require_core().describe_configs(req)
        response.results.extend(refused)
        return response

    def _alter_configs(
        self,
        request: Request,
        key: ApiKeys,
        req: cfm.AlterConfigsRequest | cfm.IncrementalAlterConfigsRequest,
    ) -> cfm.AlterConfigsResponse | cfm.IncrementalAlterConfigsResponse:
        """AlterConfigs on each topic (else TOPIC_AUTHORIZATION_FAILED for it) or on the cluster for a broker
        resource (else CLUSTER_AUTHORIZATION_FAILED), as Kafka's ``ControllerApis``."""
        auth = self.controller.auth
        refused: list[cfm.AlterConfigsResourceResponse] = []
        allowed_topics = auth.authorized_topics(
            request,
            AclOperation.ALTER_CONFIGS,
            [r.resource_name for r in req.resources if r.resource_type == cfm.CONFIG_RESOURCE_TOPIC],
        )
        cluster_ok: bool | None = None
        kept: list[Any] = []
        for r in req.resources:
            if r.resource_type == cfm.CONFIG_RESOURCE_TOPIC and r.resource_name not in allowed_topics:
                refused.append(
                    cfm.AlterConfigsResourceResponse(
                        error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                        error_message=f"Principal {request.principal} is not authorized to AlterConfigs "
                        f"topic {r.resource_name!r}",
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
                continue
            if r.resource_type == cfm.CONFIG_RESOURCE_BROKER:
                if cluster_ok is None:
                    cluster_ok = auth.authorize(request, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
                if not cluster_ok:
                    refused.append(
                        cfm.AlterConfigsResourceResponse(
                            error_code=int(Errors.CLUSTER_AUTHORIZATION_FAILED),
                            error_message=f"Principal {request.principal} is not authorized to AlterConfigs "
                            "the cluster",
                            resource_type=r.resource_type,
                            resource_name=r.resource_name,
                        )
                    )
                    continue
            kept.append(r)
        req.resources = kept
        core = self.controller._require_core()
        response: cfm.AlterConfigsResponse | cfm.IncrementalAlterConfigsResponse
        if isinstance(req, cfm.IncrementalAlterConfigsRequest):
            response = core.incremental_alter_configs(req)
        else:
            response = core.alter_configs(req)
        response.responses.extend(refused)
        return response

    # ------------------------------------------------------------------ ACLs and SCRAM credentials

    def _security_api(
        self, call: Callable[[SecurityControl, Any], Any], *, changes: bool
    ) -> ControllerHandler:
        """A handler of an ACL or SCRAM API; ``changes``: ``call`` answers (response, whether it changed)."""

        def handle(request: Request, body: Any, core: ControllerCore, now: int) -> Any:
            c = self.controller
            result = call(c._require_security(), body)
            if not changes:
                return result
            response, changed = result
            if changed:
                c.security_changed()
            return response

        return handle

    def _metadata(self, request: Request, body: m.MetadataRequest, core: ControllerCore, now: int) -> Any:
        c = self.controller
        response = core.metadata(body, c.answer_listener(request))
        response.topics = c.auth.filter_metadata_topics(request, body.topics is not None, response.topics)
        if request.kafka_encoding:
            return _kafka_client_metadata(response, c.config.cluster_id)
        return response


def _kafka_client_metadata(response: m.MetadataResponse, cluster_id: str) -> dict[str, Any]:
    """METADATA as a Kafka client reads it from a controller: the cluster id, internal topics marked, and as
    the controller a live broker (the lowest id), which forwards what is meant for the controller (KIP-590),
    as brokers answer; the controllers are on no client's list of brokers."""
    brokers = sorted(b.node_id for b in response.brokers)
    response.controller_id = brokers[0] if brokers else -1
    body = to_body(response)
    body["cluster_id"] = cluster_id
    for topic in body["topics"]:
        if topic["name"] in ("__consumer_offsets", "__transaction_state"):
            topic["is_internal"] = True
    return body


async def run_controller(config: ControllerConfig) -> None:
    """Runs a controller until SIGTERM or SIGINT, then stops it cleanly."""
    # The metadata log validates the batches it appends as a broker's log does: its C reader is loaded now,
    # not on the event loop at the first append (the first election).
    threading.Thread(target=preload_fast_scan, name="preload-record-reader", daemon=True).start()
    controller = KafkaController(config)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

            async def watch() -> None:
                async for _ in signals:
                    controller.stop()
                    return

            nursery.start_soon(watch)
            await controller.run()
            nursery.cancel_scope.cancel()


__all__ = ["CONTROLLER_APIS", "ControllerApis", "KafkaController", "run_controller"]
