"""``KafkaController``: the controller process (trio shell around :class:`ControllerCore`).

It listens with the broker's ``SocketServer`` / ``RequestChannel`` / ``RequestHandlerPool`` and answers
BROKER_REGISTRATION, BROKER_HEARTBEAT, ALTER_PARTITION, CONTROLLED_SHUTDOWN, CREATE_TOPICS,
DELETE_TOPICS, METADATA, DESCRIBE_CLUSTER and API_VERSIONS through :class:`ControllerApis`. After every
call into the core it applies the core's effects in this order: save the state (atomically), write the
journal events, reset and fill the per-broker send queues of the :class:`ControllerChannelManager`. A
timer task fences brokers whose heartbeats stopped.

Everything runs on one trio thread and no ``await`` separates a core call from applying its effects, so
the core needs no locks.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from collections.abc import Callable
from typing import Any

import trio

from broker.controller.channel_manager import ControllerChannelManager
from broker.controller.config import ControllerConfig
from broker.controller.core import ControllerCore, ControllerSettings
from broker.controller.request_batch import OutboundRequest
from broker.controller.state import save_state, start_new_epoch
from broker.journal import Journal
from broker.metrics.controller_metrics import ControllerMetrics
from broker.metrics.http_server import MetricsHttpServer
from broker.network import Request, RequestChannel, RequestHandlerPool, SocketServer, error_body
from broker.security.listener_security import (
    inter_broker_client_security,
    listener_securities,
    load_credential_store,
)
from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.common import monotonic_ms, wall_clock_ms
from protocol.errors import Errors, InvalidRequestError
from protocol.fault_injector import FaultInjector, current_faults
from protocol.faults import CONTROLLER
from protocol.schema import from_body, to_body
from protocol.security import current_client_security

log = logging.getLogger(__name__)

CONTROLLER_APIS: tuple[ApiKeys, ...] = (
    ApiKeys.METADATA,
    ApiKeys.CONTROLLED_SHUTDOWN,
    ApiKeys.API_VERSIONS,
    ApiKeys.CREATE_TOPICS,
    ApiKeys.DELETE_TOPICS,
    ApiKeys.ALTER_PARTITION,
    ApiKeys.DESCRIBE_CLUSTER,
    ApiKeys.DESCRIBE_CONFIGS,
    ApiKeys.BROKER_REGISTRATION,
    ApiKeys.BROKER_HEARTBEAT,
)


class KafkaController:
    def __init__(
        self,
        config: ControllerConfig,
        *,
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.controller_id = config.node_id
        self.clock_ms = clock_ms
        self.rng = rng or random.Random()
        self.directory = config.directory
        self.bound_port: int | None = None
        self.started = trio.Event()
        self._stop = trio.Event()
        self.core: ControllerCore | None = None
        self.journal: Journal | None = None
        self.channels = ControllerChannelManager(
            self.controller_id,
            request_timeout_s=config.get_int("controller.socket.timeout.ms") / 1000.0,
            retry_backoff_s=config.get_int("controller.retry.backoff.ms") / 1000.0,
        )
        self.apis = ControllerApis(self)
        self.request_channel = RequestChannel(config.get_int("queued.max.requests"))
        host, port = config.listener
        self.host = host
        self.faults = FaultInjector(CONTROLLER, resolve=self._resolve_peer, peers=self._peers)
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
        )
        self.metrics = ControllerMetrics(
            CONTROLLER_APIS, lambda: None if self.core is None else self.core.state
        )
        self.metrics_server: MetricsHttpServer | None = None
        if config.get_int("metrics.port") > 0:
            self.metrics_server = MetricsHttpServer(
                self.metrics.registry,
                host,
                config.get_int("metrics.port"),
                f"controller {self.controller_id}",
            )
        self.metrics.watch_socket_server(self.socket_server, self.request_channel)
        self.handler_pool = RequestHandlerPool(
            self.request_channel,
            self.metrics.requests.instrument(self.apis.handle),
            config.get_int("num.io.threads"),
            f"controller {self.controller_id}",
        )

    def stop(self) -> None:
        self._stop.set()

    def answer_listener(self, request: Request) -> str | None:
        """The listener METADATA / DESCRIBE_CLUSTER answer on: the one the request came in on when the
        controller has several (Kafka's rule), else None (brokers' inter-broker addresses, as ever)."""
        return request.listener_name if len(self.listeners) > 1 else None

    def _peers(self) -> list[tuple[str, str, int]]:
        if self.core is None:
            return []
        return [(str(b), reg.host, reg.port) for b, reg in sorted(self.core.state.brokers.items())]

    def _resolve_peer(self, host: str, port: int) -> str | None:
        for node, h, p in self._peers():
            if (h, p) == (host, port):
                return node
        return None

    # ------------------------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        for unknown in self.config.unknown_keys:
            log.warning("controller %d: unknown configuration key %r ignored", self.controller_id, unknown)
        state = start_new_epoch(self.directory, self.config.cluster_id)
        self.core = ControllerCore(
            state,
            ControllerSettings(
                controller_id=self.controller_id,
                session_timeout_ms=self.config.get_int("broker.session.timeout.ms"),
                topic_defaults=self.config.topic_defaults,
            ),
            now_ms=self.clock_ms(),
            rng=self.rng,
        )
        self.journal = Journal(
            self.directory / "events.jsonl",
            self.controller_id,
            owner_field="controller_id",
            clock_ms=wall_clock_ms,
        )
        # The controller channel's connects (tasks started below inherit this) see network faults.
        current_faults.set(self.faults)
        current_client_security.set(self.client_security)
        try:
            async with trio.open_nursery() as nursery:
                self.bound_port = await nursery.start(self.socket_server.serve)
                await nursery.start(self.channels.run)
                nursery.start_soon(self.handler_pool.run)
                nursery.start_soon(self._fence_expired_brokers)
                if self.metrics_server is not None:
                    await nursery.start(self.metrics_server.serve)
                advertised = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
                self.journal.emit(
                    "controller_started",
                    controller_epoch=state.controller_epoch,
                    host=advertised,
                    port=self.bound_port,
                    pid=os.getpid(),
                    cluster_id=state.cluster_id,
                    metadata_dir=str(self.directory),
                )
                log.info(
                    "controller %d started on %s:%d, controller epoch %d (%d broker(s), %d topic(s) known)",
                    self.controller_id,
                    advertised,
                    self.bound_port,
                    state.controller_epoch,
                    len(state.brokers),
                    len(state.topics),
                )
                self.started.set()
                task_status.started(self.bound_port)
                await self._stop.wait()
                log.info("controller %d stopping", self.controller_id)
                nursery.cancel_scope.cancel()
        finally:
            save_state(self.directory, state)
            self.journal.emit("controller_stopped", controller_epoch=state.controller_epoch)
            self.journal.close()
        log.info("controller %d stopped cleanly", self.controller_id)

    async def _fence_expired_brokers(self) -> None:
        period = min(0.25, self.config.get_int("broker.session.timeout.ms") / 10000.0)
        while True:
            await trio.sleep(period)
            core = self._require_core()
            for broker_id in core.tick(self.clock_ms()):
                log.warning(
                    "controller %d fenced broker %d: no heartbeat for broker.session.timeout.ms=%d",
                    self.controller_id,
                    broker_id,
                    core.settings.session_timeout_ms,
                )
            self.apply_effects()

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
        self.supported: dict[int, tuple[int, int]] = {
            int(k): m.SUPPORTED_VERSIONS[k] for k in CONTROLLER_APIS
        }

    async def handle(self, request: Request) -> None:
        key = ApiKeys(request.api_key)
        try:
            body: Any = from_body(m.REQUEST_TYPES[key], request.body)
        except InvalidRequestError as exc:
            log.info("controller: invalid %s request: %s", key.name, exc.message)
            request.complete(error_body(Errors.INVALID_REQUEST, exc.message))
            return
        c = self.controller
        core = c._require_core()
        now = c.clock_ms()
        response: Any
        wait_s = 0.0
        if key == ApiKeys.BROKER_REGISTRATION:
            response = core.register_broker(body, now)
        elif key == ApiKeys.BROKER_HEARTBEAT:
            response = core.heartbeat(body, now)
        elif key == ApiKeys.ALTER_PARTITION:
            response = core.alter_partition(body)
        elif key == ApiKeys.CONTROLLED_SHUTDOWN:
            response = core.controlled_shutdown(body)
        elif key == ApiKeys.CREATE_TOPICS:
            response = core.create_topics(body)
            wait_s = body.timeout_ms / 1000.0
        elif key == ApiKeys.DELETE_TOPICS:
            response = core.delete_topics(body)
            wait_s = body.timeout_ms / 1000.0
        elif key == ApiKeys.METADATA:
            response = core.metadata(body, c.answer_listener(request))
        elif key == ApiKeys.DESCRIBE_CLUSTER:
            response = core.describe_cluster(c.answer_listener(request))
        elif key == ApiKeys.DESCRIBE_CONFIGS:
            response = core.describe_configs(body)
        else:
            response = m.ApiVersionsResponse(
                api_keys=[
                    m.ApiVersionsResponseApiKey(api_key=k, min_version=lo, max_version=hi)
                    for k, (lo, hi) in sorted(self.supported.items())
                ]
            )
        done = c.apply_effects()
        if wait_s > 0:
            # Like Kafka's CREATE_TOPICS / DELETE_TOPICS, answer once the replicas know (or at the timeout).
            with trio.move_on_after(wait_s):
                for sent, event in done:
                    if sent.api_key in (ApiKeys.LEADER_AND_ISR, ApiKeys.STOP_REPLICA):
                        await event.wait()
        request.complete(to_body(response))


async def run_controller(config: ControllerConfig) -> None:
    """Runs a controller until SIGTERM or SIGINT, then stops it cleanly."""
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
