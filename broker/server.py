"""``KafkaServer``: one broker process. Builds the log manager, replica manager, fetch sessions,
KafkaApis, socket server and handler pool, runs them in one nursery, and stops them cleanly."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Awaitable, Callable

import trio

from broker.alter_partition import AlterPartitionManager
from broker.config import BrokerConfig
from broker.delayed import DelayedOperationPurgatory
from broker.fetch_session import FetchManager
from broker.fetch_session_cache import FetchSessionCache
from broker.journal import Journal
from broker.kafka_apis import KafkaApis
from broker.lifecycle import BrokerLifecycleManager, ControllerChannel
from broker.log.log import LogConfig
from broker.log_manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.network import RequestChannel, RequestHandlerPool, SocketServer
from broker.replica_manager import ReplicaManager, ReplicaManagerSettings
from broker.replica_state_listener import ReplicaStateListener
from broker.topic_configs import TopicConfigFetcher
from fetcher.fetcher_manager import ReplicaFetcherManager
from fetcher.replica_fetcher import FetcherSettings
from protocol.common import BrokerEndpoint, wall_clock_ms
from protocol.fault_injector import FaultInjector, current_faults
from protocol.faults import CONTROLLER

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT_MS = 60_000


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self._stop = trio.Event()
        self.bound_port: int | None = None
        self.started = trio.Event()
        # Why the broker stopped itself (a fatal error), if it did: it then exits with status 1.
        self.fatal_reason: str | None = None
        c = config
        self.journal = Journal(c.journal_dir / "events.jsonl", self.broker_id, clock_ms=wall_clock_ms)
        self.log_manager = LogManager(
            c.log_dir,
            self.broker_id,
            str(c.get("cluster.id")),
            LogConfig(
                segment_bytes=c.get_int("log.segment.bytes"),
                index_interval_bytes=c.get_int("log.index.interval.bytes"),
                max_message_bytes=c.get_int("message.max.bytes"),
            ),
            clock=time.time,
        )
        host, port = c.listener
        self.host = host
        self.metadata_cache = MetadataCache(BrokerEndpoint(self.broker_id, self._advertised_host(host), port))
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.state_listener = ReplicaStateListener(self.journal)
        self.replica_manager = ReplicaManager(
            ReplicaManagerSettings(
                broker_id=self.broker_id,
                replica_lag_time_max_ms=c.get_int("replica.lag.time.max.ms"),
                min_insync_replicas=c.get_int("min.insync.replicas"),
                truncation_mode=c.truncation_mode,
            ),
            self.log_manager,
            self.metadata_cache,
            self.state_listener,
            clock_ms=wall_clock_ms,
            produce_purgatory=self.produce_purgatory,
            fetch_purgatory=self.fetch_purgatory,
        )
        self.replica_manager.fatal_error_handler = self._fatal
        self.fetch_manager = FetchManager(
            FetchSessionCache(
                c.get_int("max.incremental.fetch.session.cache.slots"),
                c.get_int("min.incremental.fetch.session.eviction.ms"),
                random.Random(),
            ),
            wall_clock_ms,
        )
        self.apis = KafkaApis(self.replica_manager, self.fetch_manager)
        self.faults = FaultInjector(str(self.broker_id), resolve=self._resolve_peer, peers=self._peers)
        self.channel = RequestChannel(c.get_int("queued.max.requests"))
        self.socket_server = SocketServer(
            host=host,
            port=port,
            channel=self.channel,
            max_request_bytes=c.get_int("socket.request.max.bytes"),
            supported=self.apis.supported,
            name=f"broker {self.broker_id}",
            faults=self.faults,
        )
        self.handler_pool = RequestHandlerPool(
            self.channel, self.apis.handle, c.get_int("num.io.threads"), f"broker {self.broker_id}"
        )
        self.lifecycle: BrokerLifecycleManager | None = None
        self.alter_partition: AlterPartitionManager | None = None
        self.topic_configs: TopicConfigFetcher | None = None
        controller = c.controller
        if controller is not None:
            # Managed: register and heartbeat; leaders propose ISR changes through ALTER_PARTITION.
            controller_channel = ControllerChannel(
                controller[1],
                controller[2],
                client_id=f"broker-{self.broker_id}",
                request_timeout_s=c.get_int("request.timeout.ms") / 1000,
            )
            self.lifecycle = BrokerLifecycleManager(
                self.broker_id,
                str(c.get("cluster.id")),
                controller_channel,
                lambda: (self.metadata_cache.local.host, self.metadata_cache.local.port),
                heartbeat_interval_ms=c.get_int("broker.heartbeat.interval.ms"),
            )
            lifecycle = self.lifecycle
            self.alter_partition = AlterPartitionManager(
                self.broker_id, controller_channel, lambda: lifecycle.broker_epoch
            )
            self.replica_manager.enable_alter_partition(self.alter_partition.submit)
            self.topic_configs = TopicConfigFetcher(
                self.broker_id, controller_channel, self.replica_manager.apply_topic_configs
            )
            self.replica_manager.topic_config_fetcher = self.topic_configs
            self.replica_manager.broker_epoch = lambda: lifecycle.broker_epoch

    def _advertised_host(self, host: str) -> str:
        advertised = str(self.config.get("advertised.listeners"))
        if advertised:
            from broker.config import parse_listener

            return parse_listener(advertised)[0]
        return "127.0.0.1" if host in ("0.0.0.0", "") else host

    def _peers(self) -> list[tuple[str, str, int]]:
        """The nodes this broker knows the address of (for NET_FAULTS; the CLI finds a cluster by them)."""
        out: list[tuple[str, str, int]] = []
        controller = self.config.controller
        if controller is not None:
            out.append((CONTROLLER, controller[1], controller[2]))
        out += [(str(b.broker_id), b.host, b.port) for b in self.metadata_cache.brokers.values()]
        return out

    def _resolve_peer(self, host: str, port: int) -> str | None:
        """The node at ``host:port`` (a connection's far end), if this broker knows it."""
        for node, h, p in self._peers():
            if (h, p) == (host, port):
                return node
        return None

    def stop(self) -> None:
        """Asks the server to stop cleanly (SIGTERM)."""
        self._stop.set()

    def _fatal(self, reason: str) -> None:
        """Kafka's ``Exit.exit(1)`` from a fatal error: the shutdown is still the clean one (Kafka's shutdown
        hook), and the process then exits with status 1."""
        if self.fatal_reason is None:
            log.critical("broker %d shutting down: %s", self.broker_id, reason)
            self.fatal_reason = reason
        self.stop()

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        self.log_manager.check_meta_properties()
        self.log_manager.load_logs()
        c = self.config
        for unknown in self.config.unknown_keys:
            log.warning("broker %d: unknown configuration key %r ignored", self.broker_id, unknown)
        # Every task started below (fetchers, controller channel) inherits this: their connects see faults.
        current_faults.set(self.faults)
        async with trio.open_nursery() as nursery:
            self.bound_port = await nursery.start(self.socket_server.serve)
            local = self.metadata_cache.local
            self.metadata_cache.local = BrokerEndpoint(local.broker_id, local.host, self.bound_port)
            self.metadata_cache.brokers[self.broker_id] = self.metadata_cache.local
            self.replica_manager.host_initial_leaders(self.config.initial_leader_partitions)
            self.fetcher_manager = ReplicaFetcherManager(
                nursery,
                self.replica_manager,
                FetcherSettings(
                    wait_max_ms=c.get_int("replica.fetch.wait.max.ms"),
                    min_bytes=c.get_int("replica.fetch.min.bytes"),
                    max_bytes=c.get_int("replica.fetch.max.bytes"),
                    response_max_bytes=c.get_int("replica.fetch.response.max.bytes"),
                    backoff_ms=c.get_int("replica.fetch.backoff.ms"),
                    socket_timeout_ms=c.get_int("replica.socket.timeout.ms"),
                    truncation_mode=c.truncation_mode,
                    unclean_leader_election_enable=bool(c.get("unclean.leader.election.enable")),
                ),
                c.get_int("num.replica.fetchers"),
                clock_ms=wall_clock_ms,
            )
            self.replica_manager.fetcher_manager = self.fetcher_manager
            nursery.start_soon(self.handler_pool.run)
            if self.lifecycle is not None and self.alter_partition is not None:
                await nursery.start(self.lifecycle.run)
                await nursery.start(self.alter_partition.run)
                if self.topic_configs is not None:
                    await nursery.start(self.topic_configs.run)
            nursery.start_soon(self.produce_purgatory.run)
            nursery.start_soon(self.fetch_purgatory.run)
            self._start_periodic(nursery)
            self.journal.emit(
                "broker_started",
                host=self.metadata_cache.local.host,
                port=self.bound_port,
                pid=os.getpid(),
                log_dir=str(self.config.log_dir),
                truncation_mode=str(c.truncation_mode),
            )
            log.info("broker %d started on port %d", self.broker_id, self.bound_port)
            self.started.set()
            task_status.started(self.bound_port)
            await self._stop.wait()
            log.info("broker %d stopping", self.broker_id)
            if self.lifecycle is not None and c.get("controlled.shutdown.enable"):
                # Kafka's controlled shutdown: the controller moves this broker's leaderships away while it
                # still serves fetches, so acks=all producers see no unavailability.
                await self.lifecycle.controlled_shutdown(c.get_int("controlled.shutdown.timeout.ms") / 1000)
            self.fetcher_manager.shutdown()
            nursery.cancel_scope.cancel()
        self.replica_manager.shutdown()
        if self.fatal_reason is None:
            self.journal.emit("broker_stopped", clean=True)
        else:
            self.journal.emit("broker_stopped", clean=True, exit_code=1, reason=self.fatal_reason)
        self.journal.close()
        log.info("broker %d stopped cleanly", self.broker_id)

    def _start_periodic(self, nursery: trio.Nursery) -> None:
        c = self.config
        rm = self.replica_manager
        tasks: list[tuple[str, float, Callable[[], object]]] = [
            ("isr-expiration", c.get_int("replica.lag.time.max.ms") / 2000.0, rm.maybe_shrink_isr),
            (
                "highwatermark-checkpoint",
                c.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000.0,
                rm.checkpoint_high_watermarks,
            ),
            (
                "offsets-journal",
                c.get_int("journal.offsets.interval.ms") / 1000.0,
                self.state_listener.flush_offsets,
            ),
            (
                "recovery-point-checkpoint",
                RECOVERY_POINT_CHECKPOINT_MS / 1000.0,
                lambda: self.log_manager.checkpoint_recovery_points(flush=True),
            ),
            (
                "log-start-checkpoint",
                RECOVERY_POINT_CHECKPOINT_MS / 1000.0,
                self.log_manager.checkpoint_log_start_offsets,
            ),
        ]
        for name, period, fn in tasks:
            nursery.start_soon(self._every, name, period, fn)

    async def _every(self, name: str, period_s: float, fn: Callable[[], object]) -> None:
        while True:
            await trio.sleep(period_s)
            try:
                result = fn()
                if isinstance(result, Awaitable):
                    await result
            except Exception:
                log.exception("broker %d: periodic task %s failed", self.broker_id, name)


async def run_broker(config: BrokerConfig) -> int:
    """Runs a broker until SIGTERM or SIGINT, then stops it cleanly. Returns the process's exit status: 0, or
    1 after a fatal error (the broker stopped itself)."""
    import signal

    server = KafkaServer(config)
    async with trio.open_nursery() as nursery:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:

            async def watch() -> None:
                async for _ in signals:
                    server.stop()
                    return

            nursery.start_soon(watch)
            await server.run()
            nursery.cancel_scope.cancel()
    return 0 if server.fatal_reason is None else 1
