"""``KafkaApis.handle``: validates a request body against its schema, dispatches it by API key, and turns
exceptions into Kafka error codes. The only place that does either."""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import trio

from broker import acl_apis, partition_admin_apis
from broker.admin_apis import AdminApis
from broker.delayed_ops import FetchParams, FetchPartitionStatus, ProducePartitionStatus
from broker.delete_records import DeleteRecordsApis
from broker.fetch_session import FetchManager, IncrementalFetchContext, PartitionResponseData
from broker.group_apis import GroupApis
from broker.metadata_cache import PartitionMetadata
from broker.partition import LeaderAndIsrState
from broker.producer_id_manager import ProducerIdManager
from broker.replica_manager import FetchPartitionResult, ReplicaManager
from broker.txn_apis import TxnApis
from broker.txn_marker_apis import TxnMarkerApis, has_transactional_batch
from broker.txn_verification import TxnVerification
from protocol import environment
from protocol import messages as m
from protocol import producer_id_messages as pim
from protocol.api_keys import CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID, READ_UNCOMMITTED, ApiKeys
from protocol.api_specs import SPECS, Node, check_handlers, handled_by, node_api_versions
from protocol.common import BrokerEndpoint, TopicPartition, is_valid_topic_name
from protocol.errors import Errors, InvalidRequestError, KafkaError
from protocol.fetch_request import FetchRequestPartitionData
from protocol.schema import from_body, to_body
from server.auth_helper import ALLOW_ALL, AuthHelper, cluster_operation_of, topic_denied_message
from server.client_activity import ClientActivity, batch_span
from server.cooperative import Steps, chunks, pure
from server.request_channel import Request, error_body
from server.security.acl import AclOperation, ResourceType
from server.security.security_metadata import BrokerSecurityMetadata

log = logging.getLogger(__name__)

# Kafka's internal topics (Metadata's is_internal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# A client's admin requests, in either encoding (docs/clients.md): answered by ``AdminApis``, here or
# forwarded to the active controller (KIP-590), so any broker's address does for them.
_ADMIN_HANDLERS: dict[ApiKeys, Callable[[AdminApis, Request, Any], None]] = {
    ApiKeys.CREATE_TOPICS: AdminApis.handle_create_topics,
    ApiKeys.DELETE_TOPICS: AdminApis.handle_delete_topics,
    ApiKeys.CREATE_PARTITIONS: AdminApis.handle_create_partitions,
    ApiKeys.DESCRIBE_CONFIGS: AdminApis.handle_describe_configs,
    ApiKeys.ALTER_CONFIGS: AdminApis.handle_alter_configs,
    ApiKeys.INCREMENTAL_ALTER_CONFIGS: AdminApis.handle_incremental_alter_configs,
    ApiKeys.DESCRIBE_CLUSTER: AdminApis.handle_describe_cluster,
    ApiKeys.DESCRIBE_QUORUM: AdminApis.handle_describe_quorum,
    ApiKeys.DESCRIBE_ACLS: acl_apis.handle_describe_acls,
    ApiKeys.CREATE_ACLS: acl_apis.handle_create_acls,
    ApiKeys.DELETE_ACLS: acl_apis.handle_delete_acls,
    ApiKeys.ELECT_LEADERS: partition_admin_apis.handle_elect_leaders,
    ApiKeys.ALTER_PARTITION_REASSIGNMENTS: partition_admin_apis.handle_alter_partition_reassignments,
    ApiKeys.LIST_PARTITION_REASSIGNMENTS: partition_admin_apis.handle_list_partition_reassignments,
}

# The APIs whose requests a broker's metrics count (Kafka's RequestMetrics): those it answers itself, the
# admin APIs aside.
BROKER_APIS: tuple[ApiKeys, ...] = tuple(
    sorted(k for k in handled_by(Node.BROKER) if k not in _ADMIN_HANDLERS)
)

Handler = Callable[[Request, Any], Coroutine[Any, Any, None] | None]


class KafkaApis:
    def __init__(
        self, replica_manager: ReplicaManager, fetch_manager: FetchManager, auth: AuthHelper = ALLOW_ALL
    ) -> None:
        self.replica_manager = replica_manager
        self.auth = auth
        # Where UPDATE_METADATA's copy of the ACLs and credentials goes (set by the server).
        self.security_metadata: BrokerSecurityMetadata | None = None
        self.fetch_manager = fetch_manager
        # What clients asked and were told (client-activity.jsonl, served.jsonl; set by the server).
        self.client_activity: ClientActivity | None = None
        # Where INIT_PRODUCER_ID's ids come from (set by the server).
        self.producer_id_manager: ProducerIdManager | None = None
        # InitProducerId with a transactional id: the transaction coordinator's (set by enable_transactions).
        self.txn_apis: TxnApis | None = None
        # KIP-890: transactional appends verified with the coordinator (None: the legacy mode).
        self.txn_verification: TxnVerification | None = None
        self.broker_id = replica_manager.broker_id
        # The handler of every API the broker answers itself, by key: each has an ApiSpec
        # (protocol/api_specs.py) and every broker spec a handler once the groups are on (``check_handlers``).
        self._handlers: dict[int, Handler] = {
            ApiKeys.PRODUCE: self.handle_produce,
            ApiKeys.FETCH: self.handle_fetch,
            ApiKeys.LIST_OFFSETS: self.handle_list_offsets,
            ApiKeys.METADATA: self.handle_metadata,
            ApiKeys.LEADER_AND_ISR: self.handle_leader_and_isr,
            ApiKeys.STOP_REPLICA: self.handle_stop_replica,
            ApiKeys.UPDATE_METADATA: self.handle_update_metadata,
            ApiKeys.API_VERSIONS: self.handle_api_versions,
            ApiKeys.OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch,
            ApiKeys.DESCRIBE_REPLICA_STATE: self.handle_describe_replica_state,
            ApiKeys.INIT_PRODUCER_ID: self.handle_init_producer_id,
        }
        # The partition side of transactions: WRITE_TXN_MARKERS and DESCRIBE_PRODUCERS (docs/transactions.md).
        self.txn_markers = TxnMarkerApis(replica_manager, auth)
        self._handlers.update(self.txn_markers.handlers())
        # DELETE_RECORDS: log start offsets moved by clients (broker/delete_records.py).
        self._handlers.update(DeleteRecordsApis(replica_manager, auth).handlers())
        # DESCRIBE_LOG_DIRS: this broker's log dir (broker/partition_admin_apis.py).
        self._handlers.update(partition_admin_apis.LogDirsApis(replica_manager).handlers())
        # Clients' admin requests (forwarded to the controller, KIP-590) and auto-creation.
        self.admin = AdminApis(self.broker_id, replica_manager.metadata_cache, auth, "isrsim")
        self._handlers.update({k: functools.partial(h, self.admin) for k, h in _ADMIN_HANDLERS.items()})
        # What API_VERSIONS lists (protocol/api_specs.py): in msgpack every API a broker serves; in Kafka's
        # encoding (docs/clients.md) those with a handler here, and SASL's (answered by the socket server).
        self.supported: dict[int, tuple[int, int]] = node_api_versions(Node.BROKER, kafka=False)
        self.kafka_supported: dict[int, tuple[int, int]] = node_api_versions(
            Node.BROKER, kafka=True, bound=self._handlers
        )

    def enable_groups(self, group_apis: GroupApis) -> None:
        """Serve the consumer-group APIs through ``group_apis`` (the server's group coordinator)."""
        self._handlers.update(group_apis.handlers())
        self.kafka_supported.update(node_api_versions(Node.BROKER, kafka=True, bound=self._handlers))

    def enable_transactions(self, txn_apis: TxnApis) -> None:
        """Serve the transaction coordinator's APIs through ``txn_apis`` (docs/transactions.md)."""
        self.txn_apis = txn_apis
        self._handlers.update(txn_apis.handlers())
        self.kafka_supported.update(node_api_versions(Node.BROKER, kafka=True, bound=self._handlers))

    def check_handlers(self) -> None:
        """Every API the broker serves has its handler, and every handler its spec (at start-up)."""
        check_handlers(Node.BROKER, self._handlers)

    async def handle(self, request: Request) -> None:
        handler = self._handlers.get(request.api_key)
        if handler is None:
            request.complete(
                error_body(Errors.UNSUPPORTED_VERSION, f"api_key {request.api_key} is not served by a broker")
            )
            return
        spec = SPECS[request.api_key]
        try:
            if request.encode_later:
                # A large request (server.network.OFF_LOOP_BYTES): its body is read into the request's
                # dataclasses in a worker thread too, as it was decoded, so the loop goes on meanwhile.
                body: Any = await environment.run_sync(from_body, spec.request, request.body)
            else:
                body = from_body(spec.request, request.body)
        except InvalidRequestError as exc:
            log.info(
                "broker %d: invalid %s request: %s",
                self.broker_id,
                ApiKeys(request.api_key).name,
                exc.message,
            )
            request.complete(error_body(Errors.INVALID_REQUEST, exc.message))
            return
        try:
            cluster_operation = cluster_operation_of(spec, Node.BROKER)
            if cluster_operation is not None:
                self.auth.authorize_cluster_operation(request, cluster_operation)
            pending = handler(request, body)
            if pending is not None:
                await pending
        except KafkaError as exc:
            request.complete(error_body(exc.error, exc.message))

    # ------------------------------------------------------------------ PRODUCE

    def handle_produce(self, request: Request, req: m.ProduceRequest) -> None:
        # One response per partition, however often it is named (Kafka keeps the last records given).
        order = _unique_order((t.name, [p.index for p in t.partition_data]) for t in req.topic_data)
        entries = {(t.name, p.index): p.records for t in req.topic_data for p in t.partition_data}
        refusal: tuple[Errors, str] | None = None
        if req.acks not in (-1, 0, 1):
            refusal = Errors.INVALID_REQUIRED_ACKS, f"acks={req.acks}: must be -1, 0 or 1"
        elif any(has_transactional_batch(r) for r in entries.values()) and not (
            req.transactional_id is not None
            and self.auth.authorize(
                request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id
            )
        ):
            # Kafka's handleProduceRequest: transactional records need Write on their transactional id.
            refusal = (
                Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                f"transactional records with transactional_id {req.transactional_id!r}: Write on the "
                "transactional id is required",
            )
        if refusal is not None:
            statuses = {
                (name, idx): ProducePartitionStatus(-1, -1, -1, refusal[0], refusal[1], False)
                for name, idxs in order
                for idx in idxs
            }
            request.complete(to_body(_produce_response(order, statuses)))
            return
        acks = req.acks
        received_ms = _received_ms(request, self.replica_manager.clock_ms())
        activity = self.client_activity
        # Write on the topic, else TOPIC_AUTHORIZATION_FAILED for its partitions (Kafka's handleProduce).
        refused = self._refuse_unwritable(request, entries) if self.auth.enabled else {}
        if request.kafka_encoding:
            refused.update(_refuse_not_one_batch(request.header.api_version, entries))

        def respond(statuses: dict[TopicPartition, ProducePartitionStatus]) -> None:
            if refused:
                statuses = {**statuses, **refused}
            if activity is not None:
                client_id, host = request.header.client_id or "", request.connection.address
                for (topic, partition), s in statuses.items():
                    n = sum(b.last_offset - b.base_offset + 1 for b in s.batches) if s.error == 0 else 0
                    activity.record(client_id, host, "produce", topic, partition, records=n, error=s.error)
            if acks != 0:
                request.complete(to_body(_produce_response(order, statuses)))
            elif any(s.error != Errors.NONE for s in statuses.values()):
                # acks=0 gets no response; a failure closes the connection so the client notices
                # (Kafka's handleProduceRequest: closeConnection when the response has errors).
                request.close_connection_instead()
            else:
                request.complete(None)

        if refused and not entries:
            respond({})
            return
        if (
            self.txn_verification is not None
            and req.transactional_id
            and any(has_transactional_batch(r) for r in entries.values())
        ):
            self.txn_verification.append_records(
                req.transactional_id,
                req.timeout_ms,
                acks,
                entries,
                respond,
                client_id=request.header.client_id,
                received_ms=received_ms,
            )
            return
        self.replica_manager.append_records(
            req.timeout_ms,
            acks,
            entries,
            respond,
            client_id=request.header.client_id,
            received_ms=received_ms,
        )

    def _refuse_unwritable(
        self, request: Request, entries: dict[TopicPartition, bytes]
    ) -> dict[TopicPartition, ProducePartitionStatus]:
        """The partitions of topics the principal may not Write leave ``entries``, answered 29."""
        allowed = self.auth.authorized_topics(request, AclOperation.WRITE, (tp[0] for tp in entries))
        refused = {
            tp: ProducePartitionStatus(
                -1,
                -1,
                -1,
                Errors.TOPIC_AUTHORIZATION_FAILED,
                topic_denied_message(request, AclOperation.WRITE, tp[0]),
                False,
            )
            for tp in entries
            if tp[0] not in allowed
        }
        for tp in refused:
            del entries[tp]
        return refused

    # ------------------------------------------------------------------ FETCH

    def handle_fetch(self, request: Request, req: m.FetchRequest) -> None:
        if req.replica_id >= 0:
            # A follower's fetch moves the leader's idea of the follower's log end offset, hence the ISR and
            # the high watermark: only the cluster may send one (docs/security.md: 31 for the whole request).
            self.auth.authorize_cluster_operation(request, AclOperation.CLUSTER_ACTION)
        fetch_data: dict[TopicPartition, FetchRequestPartitionData] = {}
        for t in req.topics:
            for p in t.partitions:
                fetch_data[(t.topic, p.partition)] = FetchRequestPartitionData(
                    p.fetch_offset,
                    p.log_start_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                    p.last_fetched_epoch,
                )
        to_forget = [(f.topic, p) for f in req.forgotten_topics_data for p in f.partitions]
        context = self.fetch_manager.new_context(
            req.session_id, req.session_epoch, fetch_data, to_forget, req.replica_id >= 0
        )
        params = FetchParams(
            req.replica_id,
            req.max_wait_ms,
            req.min_bytes,
            req.max_bytes,
            # A follower reads to the log end whatever it asks (Kafka's FETCH_LOG_END).
            isolation_level=req.isolation_level if req.replica_id < 0 else READ_UNCOMMITTED,
        )
        session = None
        if isinstance(context, IncrementalFetchContext) and req.replica_id >= 0:
            # A follower's session: only partitions with something to read or report (KIP-227).
            session = context.session
            params.partitions = self.replica_manager.select_follower_partitions(
                req.replica_id, session.partition_map.items()
            )
        else:
            for tp, data in context.partitions():
                params.partitions[tp] = FetchPartitionStatus(
                    data.fetch_offset,
                    data.current_leader_epoch,
                    data.max_bytes,
                    data.log_start_offset,
                    data.last_fetched_epoch,
                )

        refused = self._refuse_unreadable(request, params)
        activity = self.client_activity if req.replica_id < 0 else None  # followers are not clients
        asked = {tp: s.fetch_offset for tp, s in params.partitions.items()}

        def respond(results: dict[TopicPartition, FetchPartitionResult]) -> None:
            if activity is not None:
                _note_fetch(activity, request, req.isolation_level, asked, results, refused)
            updates = {
                tp: PartitionResponseData(
                    int(r.error),
                    r.high_watermark,
                    r.last_stable_offset,
                    r.log_start_offset,
                    r.records,
                    r.diverging_epoch,
                    r.aborted_transactions,
                )
                for tp, r in results.items()
            }
            updates.update(refused)
            data = context.update_and_generate_response_data(updates)
            request.complete(to_body(data.to_response()))

        if not params.partitions and session is None:
            respond({})
            return
        self.replica_manager.fetch_messages(params, respond, session=session)

    def _refuse_unreadable(
        self, request: Request, params: FetchParams
    ) -> dict[TopicPartition, PartitionResponseData]:
        """A consumer needs Read on each topic it fetches: the partitions of the others leave ``params`` and
        are answered TOPIC_AUTHORIZATION_FAILED (Kafka's handleFetchRequest)."""
        if params.replica_id >= 0 or not self.auth.enabled:
            return {}
        readable = self.auth.authorized_topics(
            request, AclOperation.READ, (tp[0] for tp in params.partitions)
        )
        refused = {
            tp: PartitionResponseData(int(Errors.TOPIC_AUTHORIZATION_FAILED), -1, -1, -1, b"")
            for tp in params.partitions
            if tp[0] not in readable
        }
        for tp in refused:
            del params.partitions[tp]
        return refused

    # ------------------------------------------------------------------ LIST_OFFSETS

    async def handle_list_offsets(self, request: Request, req: m.ListOffsetsRequest) -> None:
        steps = Steps()
        client_request = req.replica_id == CONSUMER_REPLICA_ID
        fetch_only_from_leader = req.replica_id != DEBUGGING_REPLICA_ID
        named = await pure(request.encode_later, _times_named, req.topics)
        describable = self.auth.authorized_topics(
            request, AclOperation.DESCRIBE, (t.name for t in req.topics)
        )
        topics: list[m.ListOffsetsResponseTopic] = []
        for t in req.topics:
            out = m.ListOffsetsResponseTopic(name=t.name)
            for p in t.partitions:
                await steps.tick()
                resp = m.ListOffsetsResponsePartition(partition_index=p.partition_index)
                if named[(t.name, p.partition_index)] > 1:
                    # Kafka: a partition named twice is refused, each time, with INVALID_REQUEST.
                    resp.error_code = int(Errors.INVALID_REQUEST)
                    out.partitions.append(resp)
                    continue
                if t.name not in describable:
                    resp.error_code = int(Errors.TOPIC_AUTHORIZATION_FAILED)
                    out.partitions.append(resp)
                    continue
                try:
                    found = self.replica_manager.fetch_offset_for_timestamp(
                        (t.name, p.partition_index),
                        p.timestamp,
                        p.current_leader_epoch,
                        client_request=client_request,
                        fetch_only_from_leader=fetch_only_from_leader,
                        isolation_level=req.isolation_level,
                    )
                except KafkaError as exc:
                    resp.error_code = int(exc.error)
                else:
                    resp.timestamp = found.timestamp
                    resp.offset = found.offset
                    resp.leader_epoch = found.leader_epoch
                out.partitions.append(resp)
            topics.append(out)
        if self.client_activity is not None and client_request:
            client_id, host = request.header.client_id or "", request.connection.address
            for out_topic in topics:
                for part in out_topic.partitions:
                    await steps.tick()
                    self.client_activity.record(
                        client_id,
                        host,
                        "list_offsets",
                        out_topic.name,
                        part.partition_index,
                        error=part.error_code,
                    )
        request.complete(await pure(request.encode_later, to_body, m.ListOffsetsResponse(topics=topics)))

    # ------------------------------------------------------------------ METADATA

    async def handle_metadata(self, request: Request, req: m.MetadataRequest) -> None:
        steps = Steps()
        cache = self.replica_manager.metadata_cache
        # Each topic once however often it is named (Kafka takes the request's topics as a set), so the
        # response is never larger than the topics the request can name.
        names = None if req.topics is None else list(dict.fromkeys(t.name for t in req.topics))
        brokers = [
            m.MetadataResponseBroker(node_id=b.broker_id, host=b.host, port=b.port)
            for b in cache.brokers_on(request.listener_name)
        ]
        found: list[m.MetadataResponseTopic] = []
        if names is None:
            found = cache.topic_metadata(None)
        else:
            async for some in chunks(names):
                found += cache.topic_metadata(list(some))
        topics = self.auth.filter_metadata_topics(request, names is not None, found)
        if names is not None and request.kafka_encoding and req.allow_auto_topic_creation:
            topics = self.admin.maybe_create_topics(request, topics)
        controller_id = cache.controller_id
        if request.kafka_encoding:
            # As a KRaft broker answers a client: a live broker (this one), which forwards what is meant
            # for the controller (KIP-590); the controller itself is not on a client's listeners.
            controller_id = self.broker_id
        body = await pure(
            request.encode_later,
            to_body,
            m.MetadataResponse(brokers=brokers, controller_id=controller_id, topics=topics),
        )
        if request.kafka_encoding:
            body["cluster_id"] = self.admin.cluster_id  # Kafka's, from version 2
            for topic in body["topics"]:
                await steps.tick()
                if topic["name"] in INTERNAL_TOPICS:
                    topic["is_internal"] = True  # Kafka's, from version 1
                if req.include_topic_authorized_operations and topic["error_code"] != int(
                    Errors.TOPIC_AUTHORIZATION_FAILED
                ):
                    topic["topic_authorized_operations"] = self.auth.authorized_operations(
                        request, ResourceType.TOPIC, topic["name"]
                    )
            if req.include_cluster_authorized_operations:
                body["cluster_authorized_operations"] = self.auth.authorized_operations(
                    request, ResourceType.CLUSTER
                )
        if self.client_activity is not None:
            client_id, host = request.header.client_id or "", request.connection.address
            if names is None:
                self.client_activity.record(client_id, host, "metadata", None, None)
            else:
                for t in topics:
                    await steps.tick()
                    self.client_activity.record(client_id, host, "metadata", t.name, None, error=t.error_code)
        request.complete(body)

    # ------------------------------------------------------------------ controller requests

    def _stale_broker_epoch(self, request_broker_epoch: int, api: str) -> bool:
        """Kafka's ``isBrokerEpochStale``: a controller request for an earlier registration of this broker."""
        current = self.replica_manager.broker_epoch()
        if request_broker_epoch < 0 or current < 0 or request_broker_epoch >= current:
            return False
        log.info(
            "broker %d: ignoring %s with broker epoch %d; this broker's epoch is %d",
            self.broker_id,
            api,
            request_broker_epoch,
            current,
        )
        return True

    def handle_leader_and_isr(
        self, request: Request, req: m.LeaderAndIsrRequest
    ) -> Coroutine[Any, Any, None] | None:
        """Validated here; applied by the coroutine returned (it may wait for the disk), which ``handle``
        awaits."""
        if self._stale_broker_epoch(req.broker_epoch, "LEADER_AND_ISR"):
            request.complete(to_body(m.LeaderAndIsrResponse(error_code=int(Errors.STALE_BROKER_EPOCH))))
            return None
        invalid = _invalid_topic_partitions(req.topic_states)
        states = [
            (
                (t.topic_name, p.partition_index),
                LeaderAndIsrState(
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    isr=list(p.isr),
                    replicas=list(p.replicas),
                    partition_epoch=p.partition_epoch,
                    controller_epoch=p.controller_epoch,
                    is_new=p.is_new,
                ),
            )
            for t in req.topic_states
            if is_valid_topic_name(t.topic_name)
            for p in t.partition_states
        ]
        leaders = [BrokerEndpoint(b.broker_id, b.host_name, b.port) for b in req.live_leaders]

        async def apply() -> None:
            error, errors = await self.replica_manager.become_leader_or_follower_async(
                req.controller_id, req.controller_epoch, states, leaders
            )
            errors = _with_invalid(error, errors, invalid)
            partition_errors = [
                m.LeaderAndIsrResponsePartitionError(
                    topic_name=tp[0], partition_index=tp[1], error_code=int(e)
                )
                for tp, e in errors.items()
            ]
            request.complete(
                to_body(m.LeaderAndIsrResponse(error_code=int(error), partition_errors=partition_errors))
            )

        return apply()

    def handle_stop_replica(
        self, request: Request, req: m.StopReplicaRequest
    ) -> Coroutine[Any, Any, None] | None:
        if self._stale_broker_epoch(req.broker_epoch, "STOP_REPLICA"):
            request.complete(to_body(m.StopReplicaResponse(error_code=int(Errors.STALE_BROKER_EPOCH))))
            return None
        invalid = _invalid_topic_partitions(req.topic_states)
        states = [
            ((t.topic_name, p.partition_index), p.leader_epoch, p.delete_partition)
            for t in req.topic_states
            if is_valid_topic_name(t.topic_name)
            for p in t.partition_states
        ]

        async def apply() -> None:
            error, errors = await self.replica_manager.stop_replicas_async(
                req.controller_id, req.controller_epoch, states
            )
            errors = _with_invalid(error, errors, invalid)
            partition_errors = [
                m.StopReplicaResponsePartitionError(
                    topic_name=tp[0], partition_index=tp[1], error_code=int(e)
                )
                for tp, e in errors.items()
            ]
            request.complete(
                to_body(m.StopReplicaResponse(error_code=int(error), partition_errors=partition_errors))
            )

        return apply()

    def handle_update_metadata(self, request: Request, req: m.UpdateMetadataRequest) -> None:
        if self._stale_broker_epoch(req.broker_epoch, "UPDATE_METADATA"):
            request.complete(to_body(m.UpdateMetadataResponse(error_code=int(Errors.STALE_BROKER_EPOCH))))
            return
        brokers = [BrokerEndpoint(b.id, b.host, b.port) for b in req.live_brokers]
        endpoints = {
            b.id: {e.listener.upper(): (e.host, e.port) for e in b.endpoints} for b in req.live_brokers
        }
        partitions = [
            (
                (t.topic_name, p.partition_index),
                PartitionMetadata(
                    p.leader, p.leader_epoch, list(p.isr), list(p.replicas), list(p.offline_replicas)
                ),
            )
            for t in req.topic_states
            for p in t.partition_states
        ]
        error = self.replica_manager.update_metadata(
            req.controller_id, req.controller_epoch, brokers, partitions, endpoints
        )
        if error == Errors.NONE:
            if req.broker_configs is not None:
                self.replica_manager.on_dynamic_broker_configs(
                    {c.resource_name: c.configs for c in req.broker_configs}
                )
            for t in req.topic_states:
                if t.configs is not None:
                    self.replica_manager.on_topic_configs(t.topic_name, t.configs)
        if error == Errors.NONE and req.security is not None and self.security_metadata is not None:
            try:
                self.security_metadata.apply(req.security)
            except ValueError as exc:
                log.warning("broker %d: security metadata not taken: %s", self.broker_id, exc)
                error = Errors.INVALID_REQUEST
            except OSError as exc:
                log.error("broker %d: security metadata could not be saved: %s", self.broker_id, exc)
                error = Errors.KAFKA_STORAGE_ERROR
        request.complete(to_body(m.UpdateMetadataResponse(error_code=int(error))))

    # ------------------------------------------------------------------ the rest

    def handle_api_versions(self, request: Request, req: m.ApiVersionsRequest) -> None:
        supported = self.kafka_supported if request.kafka_encoding else self.supported
        keys = [
            m.ApiVersionsResponseApiKey(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(supported.items())
        ]
        request.complete(to_body(m.ApiVersionsResponse(api_keys=keys)))

    def handle_init_producer_id(self, request: Request, req: pim.InitProducerIdRequest) -> None:
        """An idempotent producer's id, with epoch 0 (Kafka's ``handleInitProducerId`` with no
        transactional id: a new id every time, whatever id and epoch the producer sends)."""

        def answer(error: Errors, producer_id: int = -1, producer_epoch: int = -1) -> None:
            body = pim.InitProducerIdResponse(
                error_code=int(error), producer_id=producer_id, producer_epoch=producer_epoch
            )
            request.complete(to_body(body))

        if req.transactional_id is not None:
            if self.txn_apis is None:
                answer(Errors.COORDINATOR_NOT_AVAILABLE)
            else:
                self.txn_apis.handle_init_producer_id(request, req)
            return
        if self.auth.enabled and not (
            self.auth.authorize(request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
            or self.auth.authorized_topics(
                request, AclOperation.WRITE, self.replica_manager.metadata_cache.topics()
            )
        ):
            answer(Errors.CLUSTER_AUTHORIZATION_FAILED)
            return
        if (req.producer_id == -1) != (req.producer_epoch == -1):
            answer(Errors.INVALID_REQUEST)
            return
        manager = self.producer_id_manager
        if manager is None:
            answer(Errors.COORDINATOR_NOT_AVAILABLE)
            return
        try:
            producer_id = manager.generate_producer_id()
        except KafkaError as exc:
            log.info("broker %d: INIT_PRODUCER_ID: %s", self.broker_id, exc.message)
            answer(exc.error)
            return
        answer(Errors.NONE, producer_id, 0)

    def handle_offset_for_leader_epoch(self, request: Request, req: m.OffsetForLeaderEpochRequest) -> None:
        # Only the leader answers, whatever the replica_id (Kafka's fetchOnlyFromLeader = true).
        # A broker (replica_id >= 0) needs ClusterAction (31 for the whole request); anyone else with
        # ClusterAction may ask too, else each topic needs Describe (29), as Kafka's handler decides.
        cluster_action = self.auth.authorize(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)
        if req.replica_id >= 0 and not cluster_action:
            self.auth.authorize_cluster_operation(request, AclOperation.CLUSTER_ACTION)
        describable = (
            None
            if cluster_action
            else self.auth.authorized_topics(request, AclOperation.DESCRIBE, (t.topic for t in req.topics))
        )
        topics: list[m.OffsetForLeaderEpochResponseTopic] = []
        for t in req.topics:
            out = m.OffsetForLeaderEpochResponseTopic(topic=t.topic)
            for p in t.partitions:
                if describable is not None and t.topic not in describable:
                    out.partitions.append(
                        m.OffsetForLeaderEpochResponsePartition(
                            error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED), partition=p.partition
                        )
                    )
                    continue
                error, epoch, offset = self.replica_manager.last_offset_for_leader_epoch(
                    (t.topic, p.partition), p.current_leader_epoch, p.leader_epoch
                )
                out.partitions.append(
                    m.OffsetForLeaderEpochResponsePartition(
                        error_code=int(error), partition=p.partition, leader_epoch=epoch, end_offset=offset
                    )
                )
            topics.append(out)
        request.complete(to_body(m.OffsetForLeaderEpochResponse(topics=topics)))

    def handle_describe_replica_state(self, request: Request, req: m.DescribeReplicaStateRequest) -> None:
        topics = None if req.topics is None else {t.name for t in req.topics}
        partitions = self.replica_manager.describe_replica_state(topics)
        cache = self.fetch_manager.cache
        sessions = m.DescribeReplicaStateResponseFetchSessions(
            count=cache.size, partitions_cached=cache.total_partitions, evictions=cache.num_evictions
        )
        request.complete(
            to_body(
                m.DescribeReplicaStateResponse(
                    broker_id=self.broker_id,
                    partitions=partitions,
                    fetch_sessions=sessions,
                    truncation_mode=str(self.replica_manager.settings.truncation_mode),
                    broker_state=self.replica_manager.broker_state(),
                )
            )
        )


def _received_ms(request: Request, now: int) -> int:
    """When the request was read off its socket, on the broker's clock (``received_ms`` in acked.jsonl)."""
    try:
        return now - max(0, round((trio.current_time() - request.received_at) * 1000))
    except RuntimeError:  # outside trio (a test driving KafkaApis directly)
        return now


def _note_fetch(
    activity: ClientActivity,
    request: Request,
    isolation_level: int,
    asked: dict[TopicPartition, int],
    results: dict[TopicPartition, FetchPartitionResult],
    refused: dict[TopicPartition, PartitionResponseData],
) -> None:
    """A consumer's FETCH in client-activity.jsonl (every partition asked) and served.jsonl (those sent
    records)."""
    client_id, host = request.header.client_id or "", request.connection.address
    for tp, r in results.items():
        span = batch_span(r.records) if r.records else None
        fetch_offset = asked.get(tp, -1)
        records = 0
        if span is not None:
            first, last, count = span
            # A batch starts at or before the offset asked; its records before that offset are not new.
            records = max(0, min(count, last - max(first, fetch_offset) + 1))
            if isolation_level == 1:  # read_committed: what the transaction checks compare with the log
                activity.served(
                    client_id,
                    host,
                    tp[0],
                    tp[1],
                    fetch_offset,
                    last,
                    isolation_level,
                    r.last_stable_offset,
                    r.aborted_transactions,
                )
            else:
                activity.served(client_id, host, tp[0], tp[1], fetch_offset, last, isolation_level)
        activity.record(client_id, host, "fetch", tp[0], tp[1], records=records, error=int(r.error))
    for tp, p in refused.items():
        activity.record(client_id, host, "fetch", tp[0], tp[1], error=p.error_code)


def _invalid_topic_partitions(topic_states: Iterable[Any]) -> dict[TopicPartition, Errors]:
    """Anyone may send controller requests to an unmanaged broker, and a topic name becomes a directory name
    (STOP_REPLICA may delete it): names Kafka would never create are refused with INVALID_TOPIC_EXCEPTION
    before they reach the disk."""
    return {
        (t.topic_name, p.partition_index): Errors.INVALID_TOPIC_EXCEPTION
        for t in topic_states
        if not is_valid_topic_name(t.topic_name)
        for p in t.partition_states
    }


def _with_invalid(
    error: Errors, errors: dict[TopicPartition, Errors], invalid: dict[TopicPartition, Errors]
) -> dict[TopicPartition, Errors]:
    """Adds the partitions refused before processing (bad topic names); a top-level error covers them too."""
    return {**errors, **(invalid if error == Errors.NONE else dict.fromkeys(invalid, error))}


def _unique_order(topics: Iterable[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    """The request's topics and partitions in order, each named once."""
    merged: dict[str, dict[int, None]] = {}
    for name, idxs in topics:
        merged.setdefault(name, {}).update(dict.fromkeys(idxs))
    return [(name, list(idxs)) for name, idxs in merged.items()]


def _produce_response(
    order: list[tuple[str, list[int]]], statuses: dict[TopicPartition, ProducePartitionStatus]
) -> m.ProduceResponse:
    topics: list[m.ProduceResponseTopic] = []
    for name, idxs in order:
        parts: list[m.ProduceResponsePartition] = []
        for idx in idxs:
            s = statuses[(name, idx)]
            ok = s.error == Errors.NONE
            parts.append(
                m.ProduceResponsePartition(
                    index=idx,
                    error_code=int(s.error),
                    base_offset=s.base_offset if ok else -1,
                    log_append_time_ms=s.log_append_time_ms if ok else -1,
                    log_start_offset=s.log_start_offset if ok else -1,
                    record_errors=[
                        m.ProduceResponseRecordError(batch_index=i, batch_index_error_message=text)
                        for i, text in s.record_errors
                    ],
                    error_message=None if ok else s.error_message,
                )
            )
        topics.append(m.ProduceResponseTopic(name=name, partition_responses=parts))
    return m.ProduceResponse(responses=topics)


def _times_named(topics: list[m.ListOffsetsRequestTopic]) -> Counter[TopicPartition]:
    return Counter((t.name, p.partition_index) for t in topics for p in t.partitions)


def _refuse_not_one_batch(
    version: int, entries: dict[TopicPartition, bytes]
) -> dict[TopicPartition, ProducePartitionStatus]:
    """Kafka's ``ProduceRequest.validateRecords``: from Produce v3 a partition's records are exactly one
    record batch; other partitions leave ``entries``, answered INVALID_RECORD (87)."""
    refused: dict[TopicPartition, ProducePartitionStatus] = {}
    if version < 3:
        return refused
    for tp, records in entries.items():
        size = len(records)
        if size == 0:
            why = f"Produce requests with version {version} must have at least one record batch per partition"
        elif size >= _BATCH_LENGTH_END and 0 < _read_batch_length(records) < size - _BATCH_LENGTH_END:
            why = (
                f"Produce requests with version {version} are only allowed to contain exactly one record "
                "batch per partition"
            )
        else:
            continue
        refused[tp] = ProducePartitionStatus(-1, -1, -1, Errors.INVALID_RECORD, why, False)
    for tp in refused:
        del entries[tp]
    return refused


# A batch's first 12 bytes: base offset (int64), then the length of the rest (int32).
_BATCH_LENGTH_END = 12


def _read_batch_length(records: bytes) -> int:
    return int.from_bytes(records[8:12], "big", signed=True)
