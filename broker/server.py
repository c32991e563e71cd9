"""``KafkaServer``: one broker process. Builds the log manager, replica manager, fetch sessions,
KafkaApis, socket server and handler pool, runs them in one nursery, and stops them cleanly."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from broker.admin_apis import AutoCreateSettings, broker_config_entries
from broker.alter_partition import AlterPartitionManager
from broker.config import KEYS_BY_NAME, BrokerConfig
from broker.delayed import DelayedOperationPurgatory
from broker.fetch_session import FetchManager
from broker.fetch_session_cache import FetchSessionCache
from broker.forwarding import ForwardingManager
from broker.group_apis import GroupApis
from broker.kafka_apis import BROKER_APIS, KafkaApis
from broker.lifecycle import BrokerLifecycleManager
from broker.log_cleaner import LogCleaner, cleaner_config_from
from broker.metadata_cache import MetadataCache
from broker.metrics.broker_metrics import BrokerMetrics
from broker.peer_connections import PeerConnections
from broker.producer_id_manager import ProducerIdManager, controller_block_source, local_block_source
from broker.replica_manager import ReplicaManager, ReplicaManagerSettings
from broker.replica_state_listener import ReplicaStateListener
from broker.topic_configs import TopicConfigFetcher, broker_log_config, broker_topic_defaults
from broker.txn_apis import TxnApis
from broker.txn_marker_sender import TxnMarkerSender
from broker.txn_verification import AddPartitionsToTxnManager, TxnVerification
from coordinator.group.coordinator import GroupCoordinator, OffsetsTopicConfig
from coordinator.group.coordinator_core import GroupConfig
from coordinator.group.group_metrics import GroupCoordinatorCollector
from coordinator.transaction.coordinator import TransactionCoordinator, TransactionTopicConfig
from coordinator.transaction.coordinator_core import TxnConfig
from coordinator.transaction.marker_channel import TransactionMarkerChannelManager
from fetcher.fetcher_manager import ReplicaFetcherManager
from fetcher.replica_fetcher import FetcherSettings
from protocol import config_messages as cfm
from protocol import controller_messages as cm
from protocol import environment
from protocol.api_keys import ApiKeys
from protocol.common import BrokerEndpoint, TopicPartition, wall_clock_ms, wall_time
from protocol.errors import Errors, InvalidRequestError, KafkaStorageError
from protocol.fault_injector import FaultInjector, current_faults
from protocol.faults import CONTROLLER
from protocol.file_names import ACKED_FILE, ACTIVITY_FILE, EVENTS_FILE, SERVED_FILE
from protocol.group_records import GROUP_METADATA_TOPIC_NAME
from protocol.record_codec import preload_fast_scan
from protocol.schema import from_body
from protocol.security import current_client_security
from server.auth_helper import AuthHelper, build_authorizer
from server.client_activity import ClientActivity
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel
from server.journal import AckJournal, Journal
from server.memory_pool import ConnectionQuotas, MemoryPool
from server.metrics.http_server import MetricsHttpServer
from server.network import SocketServer
from server.request_channel import RequestChannel, RequestHandlerPool
from server.security.listener_security import (
    inter_broker_client_security,
    listener_securities,
    load_credential_store,
)
from server.security.security_metadata import BrokerSecurityMetadata, SecurityMetadata
from storage.log_manager import LogDirLoadError, LogManager

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT_MS = 60_000


def build_log_manager(config: BrokerConfig) -> LogManager:
    """The data directory's manager (``log.dirs``), checked to be usable before anything else is built."""
    log_manager = LogManager(
        config.log_dir,
        config.broker_id,
        config.cluster_id,
        broker_log_config(config.get),
        clock=wall_time,
    )
    log_manager.check_log_dir()
    return log_manager


def open_journal(config: BrokerConfig) -> Journal:
    """``events.jsonl`` under ``journal.dir``; a journal that cannot be opened stops the start in one line."""
    return _open_journal(config, EVENTS_FILE, Journal)


def open_ack_journal(config: BrokerConfig) -> AckJournal:
    """``acked.jsonl`` beside ``events.jsonl``: every batch a leader acknowledges (docs/storage.md)."""
    return _open_journal(config, ACKED_FILE, AckJournal)


def open_client_activity(config: BrokerConfig) -> ClientActivity:
    """``client-activity.jsonl`` and ``served.jsonl`` beside ``events.jsonl`` (docs/storage.md)."""
    d = config.journal_dir
    try:
        return ClientActivity(d / ACTIVITY_FILE, d / SERVED_FILE, config.broker_id, clock_ms=wall_clock_ms)
    except OSError as e:
        raise LogDirLoadError(
            f"the journals under {d} cannot be opened ({e.strerror or e}); check journal.dir"
        ) from None


_J = TypeVar("_J", bound=Journal)


def _open_journal(config: BrokerConfig, name: str, kind: type[_J]) -> _J:
    path = config.journal_dir / name
    try:
        return kind(path, config.broker_id, clock_ms=wall_clock_ms)
    except OSError as e:
        raise LogDirLoadError(
            f"the journal {path} cannot be opened ({e.strerror or e}); check journal.dir (default: log.dirs)"
        ) from None


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self._stop = trio.Event()
        self._loaded = False
        self.bound_port: int | None = None
        self.started = trio.Event()
        # Why the broker stopped itself (a fatal error), if it did: it then exits with status 1.
        self.fatal_reason: str | None = None
        # What became of the controlled shutdown at the last stop (journaled in `broker_stopped`).
        self.controlled_shutdown = "not tried"
        self._controlled = True
        self.log_manager = build_log_manager(config)
        self.log_cleaner: LogCleaner | None = None  # started with the periodic tasks (log.cleaner.enable)
        self.journal = open_journal(config)
        # Every batch a leader acknowledges to a client, before the response goes out (docs/storage.md).
        self.acked_journal = open_ack_journal(config)
        # What every client asked and was told, gathered in memory and written once a second.
        self.client_activity = open_client_activity(config)
        self.listeners = config.listener_config
        self.host = config.listener[0]
        self._build_replication()
        self._build_request_handling()
        self._build_security()
        self._build_network()
        self.lifecycle: BrokerLifecycleManager | None = None
        self.alter_partition: AlterPartitionManager | None = None
        self.topic_configs: TopicConfigFetcher | None = None
        self.forwarding: ForwardingManager | None = None
        # INIT_PRODUCER_ID's ids: blocks from the controller, or from a file in log.dirs when unmanaged.
        self.producer_id_manager = ProducerIdManager(
            self.broker_id, local_block_source(self.broker_id, config.log_dir)
        )
        if config.controller is not None:
            self._link_to_controller(config.controller[1], config.controller[2])
        self.apis.producer_id_manager = self.producer_id_manager

    def _build_replication(self) -> None:
        """The metadata cache, the purgatories, the metrics, and the replica manager over the logs."""
        c = self.config
        inter = self.listeners.inter_broker_advertised
        self.metadata_cache = MetadataCache(BrokerEndpoint(self.broker_id, inter.host, inter.port))
        self.produce_purgatory = DelayedOperationPurgatory("Produce")
        self.fetch_purgatory = DelayedOperationPurgatory("Fetch")
        self.fetch_session_cache = FetchSessionCache(
            c.get_int("max.incremental.fetch.session.cache.slots"),
            c.get_int("min.incremental.fetch.session.eviction.ms"),
            environment.new_random(f"fetch-session-cache-{c.broker_id}"),
        )
        self.metrics = BrokerMetrics(
            BROKER_APIS,
            self.log_manager,
            self.fetch_session_cache,
            (self.produce_purgatory, self.fetch_purgatory),
        )
        self.state_listener = ReplicaStateListener(self.journal, self.metrics.replica_manager)
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
        self.replica_manager.acked_journal = self.acked_journal

    def _describe_broker_configs(self, dynamic: dict[str, dict[str, str]]) -> None:
        """What DescribeConfigs shows of this broker's keys, static and ``dynamic`` ("" and its id), and of
        the topic configs they are the defaults of."""
        c = self.config
        admin = self.apis.admin
        admin.broker_configs = broker_config_entries(
            c.values, {k: key.default for k, key in KEYS_BY_NAME.items()}, dynamic, self.broker_id
        )
        own, cluster = dynamic.get(str(self.broker_id), {}), dynamic.get("", {})

        def source_of(key: str) -> int | None:
            if key in own:
                return cfm.CONFIG_SOURCE_DYNAMIC_BROKER
            if key in cluster:
                return cfm.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
            default = c.values.get(key) == KEYS_BY_NAME[key].default
            return None if default else cm.CONFIG_SOURCE_STATIC_BROKER

        merged = {**cluster, **own}
        admin.topic_config_defaults = broker_topic_defaults(
            lambda key: merged[key] if key in merged else c.get(key), source_of
        )

    def _build_request_handling(self) -> None:
        """``KafkaApis`` with its fetch sessions and the authorizer's helper."""
        self.fetch_manager = FetchManager(self.fetch_session_cache, wall_clock_ms)
        self.auth = AuthHelper(build_authorizer(self.config), f"broker {self.broker_id}")
        self.apis = KafkaApis(self.replica_manager, self.fetch_manager, self.auth)
        self.apis.client_activity = self.client_activity
        c = self.config
        self.apis.admin.cluster_id = c.cluster_id
        self.apis.admin.auto_create = AutoCreateSettings(
            enable=bool(c.get("auto.create.topics.enable")),
            num_partitions=c.get_int("num.partitions"),
            replication_factor=c.get_int("default.replication.factor"),
        )
        self._describe_broker_configs({})
        # Dynamic broker configs (AlterConfigs on a BROKER resource) come with UPDATE_METADATA.
        self.replica_manager.static_config = c.get
        self.replica_manager.dynamic_listeners.append(self._describe_broker_configs)
        # Consumer groups: this broker coordinates the groups of the __consumer_offsets partitions it leads.
        self.group_coordinator = GroupCoordinator(
            self.broker_id,
            GroupConfig(
                min_session_timeout_ms=c.get_int("group.min.session.timeout.ms"),
                max_session_timeout_ms=c.get_int("group.max.session.timeout.ms"),
                max_size=c.get_int("group.max.size"),
                initial_rebalance_delay_ms=c.get_int("group.initial.rebalance.delay.ms"),
                num_partitions=c.get_int("offsets.topic.num.partitions"),
                max_metadata_size=c.get_int("offset.metadata.max.bytes"),
                offsets_retention_ms=c.get_int("offsets.retention.minutes") * 60 * 1000,
                offsets_retention_check_interval_ms=c.get_int("offsets.retention.check.interval.ms"),
            ),
            OffsetsTopicConfig(
                num_partitions=c.get_int("offsets.topic.num.partitions"),
                replication_factor=c.get_int("offsets.topic.replication.factor"),
                commit_timeout_ms=c.get_int("offsets.commit.timeout.ms"),
                load_buffer_size=c.get_int("offsets.load.buffer.size"),
            ),
            self.replica_manager,
            self.journal,
            clock_ms=wall_clock_ms,
        )
        group_apis = GroupApis(self.group_coordinator, self.auth, self.replica_manager.metadata_cache)
        group_apis.client_activity = self.client_activity
        self.apis.enable_groups(group_apis)
        self._build_transaction_coordinator(group_apis)
        self.apis.check_handlers()  # every API of protocol/api_specs.py a broker serves has its handler
        self.metrics.registry.register(GroupCoordinatorCollector(self.group_coordinator.core))

    def _build_transaction_coordinator(self, group_apis: GroupApis) -> None:
        """Transactions (docs/transactions.md): this broker coordinates the transactional ids of the
        __transaction_state partitions it leads, and sends their markers to the partitions' leaders."""
        c = self.config
        # One connection per peer for the markers and the verifications (broker/peer_connections.py).
        self.txn_peers = PeerConnections(
            self.broker_id, self.replica_manager.metadata_cache, f"broker-{self.broker_id}-txn"
        )
        sender = TxnMarkerSender(self.broker_id, self.replica_manager.metadata_cache, peers=self.txn_peers)
        self.txn_marker_channel = TransactionMarkerChannelManager(
            self.broker_id, sender.leader_of, sender.send
        )
        self.txn_coordinator = TransactionCoordinator(
            self.broker_id,
            TxnConfig(
                num_partitions=c.get_int("transaction.state.log.num.partitions"),
                max_timeout_ms=c.get_int("transaction.max.timeout.ms"),
                offsets_num_partitions=c.get_int("offsets.topic.num.partitions"),
            ),
            TransactionTopicConfig(
                replication_factor=c.get_int("transaction.state.log.replication.factor"),
                min_isr=c.get_int("transaction.state.log.min.isr"),
                load_buffer_size=c.get_int("transaction.state.log.load.buffer.size"),
                abort_timed_out_interval_ms=c.get_int(
                    "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                ),
            ),
            self.replica_manager,
            self.txn_marker_channel,
            self.journal,
            clock_ms=wall_clock_ms,
            generate_producer_id=lambda: self.producer_id_manager.generate_producer_id(),
        )
        txn_apis = TxnApis(
            self.txn_coordinator, self.auth, self.replica_manager.metadata_cache, self.group_coordinator
        )
        group_apis.find_transaction_coordinator = txn_apis.find_coordinator
        self.apis.enable_transactions(txn_apis)
        self.add_partitions_to_txn_manager: AddPartitionsToTxnManager | None = None
        if bool(c.get("transaction.partition.verification.enable")):
            self.add_partitions_to_txn_manager = AddPartitionsToTxnManager(
                self.broker_id,
                self.replica_manager.metadata_cache,
                self.txn_coordinator.transaction_topic_partition,
                peers=self.txn_peers,
            )
            self.apis.txn_verification = TxnVerification(
                self.replica_manager, self.add_partitions_to_txn_manager
            )
        group_coordinator = self.group_coordinator

        def offsets_marker(producer_id: int, commit: bool, written: list[TopicPartition]) -> None:
            # A marker on __consumer_offsets completes TxnOffsetCommit's offsets held for the producer.
            for topic, partition in written:
                if topic == GROUP_METADATA_TOPIC_NAME:
                    group_coordinator.on_txn_marker(producer_id, partition, commit)

        self.apis.txn_markers.add_marker_listener(offsets_marker)

    def _build_security(self) -> None:
        """Security (docs/security.md): the live credential store SASL checks, what each listener asks of a
        connection, who this broker is when it connects to its peers (inter-broker listener), and the last
        copy of the cluster's ACLs and SCRAM credentials the controller sent, kept under <log.dirs>/security
        so that a restarted broker authorizes and authenticates at once."""
        c = self.config
        self.credential_store = load_credential_store(c.log_dir)
        protocols = self.listeners.protocols
        names = [e.name for e in self.listeners.listeners]
        self.listener_security = listener_securities(c.values, protocols, names)
        self.client_security = inter_broker_client_security(c.values, protocols[self.listeners.inter_broker])
        self.security_metadata = BrokerSecurityMetadata(
            SecurityMetadata.directory_of(c.log_dir),
            self.auth.authorizer,
            self.credential_store,
            f"broker {self.broker_id}",
        )
        try:
            self.security_metadata.load()
        except ValueError as e:
            raise LogDirLoadError(f"{e}; remove it to start without ACLs and users") from None
        self.apis.security_metadata = self.security_metadata

    def _build_network(self) -> None:
        """The request channel, the socket server on every listener (what each asks of a connection, the
        network faults), the handler pool, and the metrics endpoint."""
        c = self.config
        name = f"broker {self.broker_id}"
        self.faults = FaultInjector(
            str(self.broker_id),
            resolve=self._resolve_peer,
            peers=self._peers,
            voters=_quorum_voter_names(self.config),
        )
        self.channel = RequestChannel(c.get_int("queued.max.requests"))
        listeners = self.listeners.listeners
        self.socket_server = SocketServer(
            host=self.host,
            port=c.listener[1],
            listeners=[(e.name, e.host, e.port) for e in listeners],
            channel=self.channel,
            max_request_bytes=c.get_int("socket.request.max.bytes"),
            supported=self.apis.supported,
            kafka_supported=self.apis.kafka_supported,
            name=name,
            faults=self.faults,
            memory_pool=MemoryPool(c.get_int("queued.max.request.bytes")),
            quotas=ConnectionQuotas(c.get_int("max.connections"), c.get_int("max.connections.per.ip")),
            connections_max_idle_ms=c.get_int("connections.max.idle.ms"),
            security=self.listener_security,
            credential_store=self.credential_store,
        )
        self.socket_server.net_faults_check = self.auth.net_faults_check
        # Protocol-level fault rules' hits go to events.jsonl as `rule_hit` (docs/faults.md).
        self.faults.on_rule_hit = lambda record: self.journal.emit("rule_hit", **record)
        self.metrics.watch_socket_server(self.socket_server, self.channel)
        self.handler_pool = RequestHandlerPool(
            self.channel,
            self.metrics.requests.instrument(self.apis.handle),
            c.get_int("num.io.threads"),
            name,
        )
        self.metrics_server: MetricsHttpServer | None = None
        metrics_port = c.get_int("metrics.port")
        if metrics_port > 0:
            self.metrics_server = MetricsHttpServer(self.metrics.registry, self.host, metrics_port, name)

    def _link_to_controller(self, host: str, port: int) -> None:
        """Managed: register and heartbeat; leaders propose ISR changes through ALTER_PARTITION and ask the
        controller for topic configs."""
        c = self.config
        controller_channel = ControllerChannel(
            host,
            port,
            client_id=f"broker-{self.broker_id}",
            request_timeout_s=c.get_int("request.timeout.ms") / 1000,
            voters=c.controller_voters,
        )
        voter_ids = c.controller_voter_ids

        def follow_controller(controller_id: int, controller_epoch: int) -> None:
            address = voter_ids.get(controller_id)
            if address is not None:
                log.info(
                    "broker %d: controller %d is active (controller epoch %d); heartbeating to it",
                    self.broker_id,
                    controller_id,
                    controller_epoch,
                )
                controller_channel.follow(address)

        self.replica_manager.controller_listeners.append(follow_controller)
        lifecycle = self.lifecycle = BrokerLifecycleManager(
            self.broker_id,
            c.cluster_id,
            controller_channel,
            self._registered_listeners,
            heartbeat_interval_ms=c.get_int("broker.heartbeat.interval.ms"),
            session_timeout_ms=c.get_int("broker.session.timeout.ms"),
        )
        self.alter_partition = AlterPartitionManager(
            self.broker_id, controller_channel, lambda: lifecycle.broker_epoch
        )
        self.replica_manager.enable_alter_partition(self.alter_partition.submit)
        self.topic_configs = TopicConfigFetcher(
            self.broker_id, controller_channel, self.replica_manager.apply_topic_configs
        )
        self.replica_manager.topic_config_fetcher = self.topic_configs
        self.forwarding = ForwardingManager(self.broker_id, controller_channel, voter_ids)
        self.apis.admin.forwarding = self.forwarding
        self.replica_manager.broker_epoch = lambda: lifecycle.broker_epoch
        self.replica_manager.broker_state = self._broker_state
        # Kafka's configs of __consumer_offsets: compacted, 100 MiB segments (offsets.topic.segment.bytes).
        self.group_coordinator.create_topic = lambda name, partitions, rf: create_topic(
            controller_channel,
            name,
            partitions,
            rf,
            {"cleanup.policy": "compact", "segment.bytes": "104857600"},
        )
        self.txn_coordinator.create_topic = lambda name, partitions, rf, configs: create_topic(
            controller_channel, name, partitions, rf, configs
        )
        self.producer_id_manager.source = controller_block_source(
            self.broker_id, controller_channel, lambda: lifecycle.broker_epoch
        )

    def _broker_state(self) -> str:
        """Kafka's BrokerState of a managed broker, as its BrokerLifecycleManager moves it."""
        lifecycle = self.lifecycle
        if self._stop.is_set():
            return (
                "PENDING_CONTROLLED_SHUTDOWN"
                if lifecycle is not None and lifecycle.want_shut_down
                else "SHUTTING_DOWN"
            )
        if lifecycle is None:
            return "RUNNING"
        if lifecycle.broker_epoch < 0:
            return "STARTING"
        return "RECOVERY" if lifecycle.is_fenced else "RUNNING"

    def _advertise(self) -> None:
        """Once bound: each listener's advertised address, the port being the bound one where the advertised
        port is 0 (a listener bound to port 0 and not named in advertised.listeners, say)."""
        bound = self.socket_server.bound_ports
        endpoints = {e.name: (e.host, e.port or bound.get(e.name, 0)) for e in self.listeners.advertised}
        host, port = endpoints[self.listeners.inter_broker]
        self.metadata_cache.local = BrokerEndpoint(self.broker_id, host, port)
        self.metadata_cache.local_endpoints = endpoints
        self.metadata_cache.brokers[self.broker_id] = self.metadata_cache.local

    def _registered_listeners(self) -> list[tuple[str, str, int]]:
        """What registration sends: every advertised listener, the inter-broker one first."""
        local = self.metadata_cache.local_endpoints
        inter = self.listeners.inter_broker
        names = [inter, *(n for n in local if n != inter)]
        return [(n, *local[n]) for n in names if n in local]

    def _peers(self) -> list[tuple[str, str, int]]:
        """The nodes this broker knows the address of (for NET_FAULTS; the CLI finds a cluster by them)."""
        out: list[tuple[str, str, int]] = []
        voters = self.config.controller_nodes
        if len(voters) > 1:  # the voters of a controller quorum, each named by its id
            out += [(str(node_id), h, p) for node_id, h, p in voters]
        elif voters:
            out.append((CONTROLLER, voters[0][1], voters[0][2]))
        out += [(str(b.broker_id), b.host, b.port) for b in self.metadata_cache.brokers.values()]
        return out

    def _resolve_peer(self, host: str, port: int) -> str | None:
        """The node at ``host:port`` (a connection's far end), if this broker knows it."""
        for node, h, p in self._peers():
            if (h, p) == (host, port):
                return node
        return None

    def stop(self, *, controlled: bool = True) -> None:
        """Asks the server to stop cleanly (SIGTERM); ``controlled=False`` (SIGUSR1) skips the controlled
        shutdown, for a stop of the whole cluster where no other broker can take the leaderships."""
        if not controlled:
            self._controlled = False
        self._stop.set()

    def _fatal(self, reason: str) -> None:
        """Kafka's ``Exit.exit(1)`` from a fatal error: the shutdown is still the clean one (Kafka's shutdown
        hook), and the process then exits with status 1."""
        if self.fatal_reason is None:
            log.critical("broker %d shutting down: %s", self.broker_id, reason)
            self.fatal_reason = reason
        self.stop()

    def load(self) -> None:
        """Checks ``meta.properties`` and loads the logs (recovering them after an unclean stop). Raises
        ``LogDirLoadError`` (one line: the file and what to do) if the data directory cannot be used.
        :meth:`run` calls it if it was not called first."""
        if self._loaded:
            return
        self.log_manager.check_meta_properties()
        self.log_manager.load_logs()
        self._loaded = True

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        self.load()
        c = self.config
        for unknown in self.config.unknown_keys:
            log.warning("broker %d: unknown configuration key %r ignored", self.broker_id, unknown)
        # Every task started below (fetchers, controller channel) inherits this: their connects see faults.
        current_faults.set(self.faults)
        # ... and authenticate as this broker on the inter-broker listener (fetchers, controller channel).
        current_client_security.set(self.client_security)
        async with trio.open_nursery() as nursery:
            await nursery.start(self.socket_server.serve)
            self.bound_port = self.socket_server.bound_ports[self.listeners.inter_broker]
            self._advertise()
            try:
                self.replica_manager.host_initial_leaders(self.config.initial_leader_partitions)
            except KafkaStorageError as e:
                raise LogDirLoadError(
                    f"cannot host initial.leader.partitions: {e.message}; fix the log dir {c.log_dir}"
                ) from None
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
            self.metrics.state.fetcher_manager = self.fetcher_manager
            if self.metrics_server is not None:
                await nursery.start(self.metrics_server.serve)
            await nursery.start(self.group_coordinator.run)
            await nursery.start(self.txn_peers.run)
            await nursery.start(self.txn_coordinator.run)
            if self.add_partitions_to_txn_manager is not None:
                await nursery.start(self.add_partitions_to_txn_manager.run)
            nursery.start_soon(self.handler_pool.run)
            if self.lifecycle is not None and self.alter_partition is not None:
                await nursery.start(self.lifecycle.run)
                await nursery.start(self.alter_partition.run)
                if self.topic_configs is not None:
                    await nursery.start(self.topic_configs.run)
                if self.forwarding is not None:
                    await nursery.start(self.forwarding.run)
            await nursery.start(self.producer_id_manager.run)
            nursery.start_soon(self._handle_log_dir_failures)
            nursery.start_soon(self.produce_purgatory.run)
            nursery.start_soon(self.fetch_purgatory.run)
            nursery.start_soon(self.replica_manager.delete_records_purgatory.run)
            self._start_periodic(nursery)
            self.journal.emit(
                "broker_started",
                host=self.metadata_cache.local.host,
                port=self.bound_port,
                listeners=[f"{n}://{h}:{p}" for n, (h, p) in self.metadata_cache.local_endpoints.items()],
                pid=environment.process_id(),
                log_dir=str(self.config.log_dir),
                truncation_mode=str(c.truncation_mode),
            )
            log.info("broker %d started on port %d", self.broker_id, self.bound_port)
            self.started.set()
            task_status.started(self.bound_port)
            await self._stop.wait()
            log.info("broker %d stopping", self.broker_id)
            if self.lifecycle is None or not c.get("controlled.shutdown.enable"):
                self.controlled_shutdown = "disabled"
            elif not self._controlled:
                self.controlled_shutdown = "skipped"
                log.info("broker %d: controlled shutdown skipped (asked to stop without it)", self.broker_id)
            else:
                # Kafka's controlled shutdown: the controller moves this broker's leaderships away while it
                # still serves fetches, so acks=all producers see no unavailability.
                done = await self.lifecycle.controlled_shutdown(
                    c.get_int("controlled.shutdown.timeout.ms") / 1000
                )
                self.controlled_shutdown = "completed" if done else "incomplete"
            self.fetcher_manager.shutdown()
            nursery.cancel_scope.cancel()
        self.replica_manager.shutdown()
        if self.fatal_reason is None:
            self.journal.emit("broker_stopped", clean=True, controlled_shutdown=self.controlled_shutdown)
        else:
            self.journal.emit(
                "broker_stopped",
                clean=True,
                controlled_shutdown=self.controlled_shutdown,
                exit_code=1,
                reason=self.fatal_reason,
            )
        self.journal.close()
        self.acked_journal.close()
        self.client_activity.close()
        log.info("broker %d stopped cleanly", self.broker_id)

    async def _handle_log_dir_failures(self) -> None:
        """Kafka's ``LogDirFailureHandler``: a failed log dir (reported synchronously by the failure
        channel) takes its partitions offline here, and the controller is told with the next heartbeat."""
        failed = trio.Event()
        channel = self.log_manager.failure_channel
        channel.add_listener(lambda _dir: failed.set())
        if channel.offline_log_dirs:
            failed.set()
        handled: set[str] = set()
        while True:
            await failed.wait()
            failed = trio.Event()
            for log_dir in channel.offline_log_dirs:
                if log_dir not in handled:
                    handled.add(log_dir)
                    self.replica_manager.handle_log_dir_failure(log_dir)
            if self.lifecycle is not None:
                self.lifecycle.report_offline_log_dirs(channel.offline_log_dirs)

    def _start_periodic(self, nursery: trio.Nursery) -> None:
        c = self.config
        rm = self.replica_manager
        tasks: list[tuple[str, float, Callable[[], object]]] = [
            ("isr-expiration", rm.settings.replica_lag_time_max_ms / 2000.0, rm.maybe_shrink_isr),
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
            ("client-activity-journal", 1.0, self._flush_client_activity),
            (
                "recovery-point-checkpoint",
                RECOVERY_POINT_CHECKPOINT_MS / 1000.0,
                self._flush_logs,
            ),
            (
                "log-start-checkpoint",
                RECOVERY_POINT_CHECKPOINT_MS / 1000.0,
                self.log_manager.checkpoint_log_start_offsets,
            ),
            ("log-retention", c.get_int("log.retention.check.interval.ms") / 1000.0, rm.cleanup_logs),
        ]
        for name, period, fn in tasks:
            nursery.start_soon(self._every, name, period, fn)
        cleaner_config = cleaner_config_from(c.get)
        if cleaner_config.enable:

            def high_watermark(tp: TopicPartition) -> int | None:
                partition = rm.partitions.get(tp)
                if partition is None:
                    return None
                if rm.topic_config_fetcher is not None and tp[0] not in rm.topic_configs:
                    return None  # its topic's policy is not known yet (after a restart)
                return partition.high_watermark

            self.log_cleaner = LogCleaner(self.log_manager, cleaner_config, high_watermark)
            nursery.start_soon(self.log_cleaner.run)

    async def _flush_client_activity(self) -> None:
        """client-activity.jsonl and served.jsonl: what was gathered is taken here and written from a worker
        thread (formatting 100,000 lines takes a second)."""
        taken = self.client_activity.take()
        await environment.run_sync(self.client_activity.write, *taken)

    async def _flush_logs(self) -> None:
        """The periodic flush and recovery-point checkpoint, a log per event-loop step."""
        for _ in self.log_manager.flush_and_checkpoint_stepwise():
            await trio.sleep(0)

    async def _every(self, name: str, period_s: float, fn: Callable[[], object]) -> None:
        while True:
            await trio.sleep(period_s)
            try:
                result = fn()
                if isinstance(result, Awaitable):
                    await result
            except Exception:
                log.exception("broker %d: periodic task %s failed", self.broker_id, name)


async def create_topic(
    channel: ControllerChannel,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str] | None = None,
) -> Errors:
    """Asks the controller to create a topic (as Kafka's brokers do for ``__consumer_offsets`` and
    ``__transaction_state``)."""
    request = cm.CreateTopicsRequest(
        topics=[
            cm.CreateTopicsRequestTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                configs=dict(configs or {}),
            )
        ]
    )
    try:
        resp = from_body(cm.CreateTopicsResponse, await channel.request(ApiKeys.CREATE_TOPICS, request))
    except CONTROLLER_UNREACHABLE as exc:
        log.info("creating topic %s: the controller did not answer (%r)", name, exc)
        return Errors.COORDINATOR_NOT_AVAILABLE
    except InvalidRequestError as exc:
        log.warning("creating topic %s: unexpected answer from the controller: %s", name, exc)
        return Errors.UNKNOWN_SERVER_ERROR
    for topic in resp.topics:
        if topic.name == name:
            try:
                return Errors(topic.error_code)
            except ValueError:
                return Errors.UNKNOWN_SERVER_ERROR
    return Errors.UNKNOWN_SERVER_ERROR


async def run_broker(config: BrokerConfig) -> int:
    """Runs a broker until SIGTERM or SIGINT, then stops it cleanly (SIGUSR1: cleanly, but without the
    controlled shutdown). Returns the process's exit status: 0, or 1 after a fatal error (the broker
    stopped itself). A refusal to start raises ``LogDirLoadError`` itself, never wrapped in an exception
    group."""
    import signal

    threading.Thread(target=preload_fast_scan, name="preload-record-reader", daemon=True).start()
    server = KafkaServer(config)
    server.load()
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGUSR1) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        server.stop(controlled=signum != signal.SIGUSR1)
                        return

                nursery.start_soon(watch)
                try:
                    await server.run()
                finally:
                    nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        refusal = group.subgroup(LogDirLoadError)
        if refusal is None:
            raise
        first: BaseException = refusal
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return 0 if server.fatal_reason is None else 1


def _quorum_voter_names(config: BrokerConfig) -> frozenset[str]:
    """The controllers' names in network faults: a quorum's voters by id; none for a single controller
    (it is the node ``controller``)."""
    voters = config.controller_nodes
    return frozenset(str(node_id) for node_id, _, _ in voters) if len(voters) > 1 else frozenset()
