"""What a broker answers for a client's admin requests (docs/clients.md), in either encoding: CreateTopics,
DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and DescribeQuorum
are forwarded to the active controller (KIP-590,
``broker.forwarding``),
DescribeCluster is answered from the broker's metadata cache, and a client's METADATA for a topic that does
not exist creates it (Kafka's ``AutoTopicCreationManager``: ``auto.create.topics.enable``,
``num.partitions``, ``default.replication.factor``).

The controller sees the broker's own principal on a forwarded request, so the client is authorized here
first, as the controller would (Create on the cluster or the topic, Delete on the topic, DescribeConfigs on
the topic, Describe on the cluster for DescribeQuorum); what it may not do is not forwarded and is answered
TOPIC_AUTHORIZATION_FAILED (CLUSTER_AUTHORIZATION_FAILED for DescribeQuorum).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from broker.forwarding import ForwardingManager
from broker.metadata_cache import MetadataCache
from protocol import config_messages as cfm
from protocol import messages as m
from protocol import raft_messages as rm
from protocol.admin_bounds import (
    EXCESSIVE_PARTITIONS_ERROR,
    EXCESSIVE_PARTITIONS_MESSAGE,
    create_topics_too_many_partitions,
)
from protocol.api_keys import ApiKeys
from protocol.common import is_valid_topic_name
from protocol.errors import Errors
from protocol.schema import to_body
from server.auth_helper import AuthHelper
from server.request_channel import Request, error_body
from server.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

# A forwarded request waits this much longer than the time it gives the controller.
FORWARD_MARGIN_S = 30.0
# Kafka's ConfigResource type of a broker, and its DescribeConfigs config sources.
CONFIG_RESOURCE_BROKER = 4
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


@dataclass(frozen=True, slots=True)
class BrokerConfigEntry:
    """One of this broker's settings as DescribeConfigs shows it (a sensitive value is never shown)."""

    name: str
    value: str | None
    is_default: bool
    is_sensitive: bool = False
    # Kafka's ConfigType (DescribeConfigs v3+): BOOLEAN 1, STRING 2, INT 3, LONG 5, PASSWORD 9
    config_type: int = 2
    # None: STATIC_BROKER_CONFIG or DEFAULT_CONFIG by ``is_default``; else a dynamic source (2 or 3)
    config_source: int | None = None
    read_only: bool = True


@dataclass(slots=True)
class AutoCreateSettings:
    """Kafka's broker keys for topics created by a client's METADATA."""

    enable: bool = True
    num_partitions: int = 1
    # -1: min(3, live brokers) (docs/clients.md)
    replication_factor: int = -1


class AdminApis:
    def __init__(self, broker_id: int, cache: MetadataCache, auth: AuthHelper, cluster_id: str) -> None:
        self.broker_id = broker_id
        self.cache = cache
        self.auth = auth
        self.cluster_id = cluster_id
        # None on a broker without a controller: the forwarded APIs are answered NOT_CONTROLLER.
        self.forwarding: ForwardingManager | None = None
        self.auto_create = AutoCreateSettings()
        self.auto_created: set[str] = set()
        # This broker's settings for DescribeConfigs on its own BROKER resource (set by the server).
        self.broker_configs: list[BrokerConfigEntry] = []
        # Topic configs whose default this broker's keys change (log.retention.ms for retention.ms ...),
        # with the value they make: what a topic that does not set them has here (set by the server).
        self.topic_config_defaults: dict[str, tuple[str, int]] = {}

    # ------------------------------------------------------------------ forwarding

    def _forward(
        self,
        request: Request,
        api_key: ApiKeys,
        body: Any,
        timeout_ms: int,
        respond: Any,
    ) -> None:
        forwarding = self.forwarding
        if forwarding is None:
            respond(None, Errors.NOT_CONTROLLER, "this broker has no controller to forward to")
            return

        def done(answer: dict[str, Any] | None, why: str) -> None:
            if answer is None:
                respond(None, Errors.REQUEST_TIMED_OUT, why)
            else:
                respond(answer, Errors.NONE, "")

        forwarding.forward(api_key, body, done, timeout_s=timeout_ms / 1000.0 + FORWARD_MARGIN_S)

    # ------------------------------------------------------------------ CREATE_TOPICS (19)

    def handle_create_topics(self, request: Request, req: m.CreateTopicsRequest) -> None:
        auth = self.auth
        if auth.authorize(request, AclOperation.CREATE, ResourceType.CLUSTER):
            allowed = list(req.topics)
        else:
            allowed = [
                t
                for t in req.topics
                if auth.authorize(request, AclOperation.CREATE, ResourceType.TOPIC, t.name)
            ]
        names = {t.name for t in allowed}
        refused = [
            m.CreateTopicsResponseTopic(
                name=t.name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Create topic {t.name!r}",
            )
            for t in req.topics
            if t.name not in names
        ]
        if not allowed:
            request.complete(to_body(m.CreateTopicsResponse(topics=refused)))
            return
        req.topics = allowed
        counts = Counter(t.name for t in allowed)
        # A cheap early refusal of what the controller refuses anyway (docs/controller.md): a default count
        # (-1) is the controller's, counted here as one partition.
        if create_topics_too_many_partitions((t for t in allowed if counts[t.name] == 1), 1):
            over = [
                m.CreateTopicsResponseTopic(
                    name=t.name,
                    error_code=int(EXCESSIVE_PARTITIONS_ERROR),
                    error_message=EXCESSIVE_PARTITIONS_MESSAGE,
                )
                for t in allowed
            ]
            request.complete(to_body(m.CreateTopicsResponse(topics=over + refused)))
            return

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            if answer is None:
                answer = to_body(
                    m.CreateTopicsResponse(
                        topics=[
                            m.CreateTopicsResponseTopic(name=t.name, error_code=int(error), error_message=why)
                            for t in allowed
                        ]
                    )
                )
            answer["topics"] = list(answer.get("topics") or []) + [to_body(r) for r in refused]
            request.complete(answer)

        self._forward(request, ApiKeys.CREATE_TOPICS, req, req.timeout_ms, respond)

    # ------------------------------------------------------------------ DELETE_TOPICS (20)

    def handle_delete_topics(self, request: Request, req: m.DeleteTopicsRequest) -> None:
        allowed = self.auth.authorized_topics(request, AclOperation.DELETE, req.topic_names)
        refused = [
            m.DeleteTopicsResponseTopic(
                name=name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Delete topic {name!r}",
            )
            for name in dict.fromkeys(req.topic_names)
            if name not in allowed
        ]
        names = [n for n in req.topic_names if n in allowed]
        if not names:
            request.complete(to_body(m.DeleteTopicsResponse(responses=refused)))
            return
        req.topic_names = names

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            if answer is None:
                answer = to_body(
                    m.DeleteTopicsResponse(
                        responses=[
                            m.DeleteTopicsResponseTopic(name=n, error_code=int(error), error_message=why)
                            for n in dict.fromkeys(names)
                        ]
                    )
                )
            answer["responses"] = list(answer.get("responses") or []) + [to_body(r) for r in refused]
            request.complete(answer)

        self._forward(request, ApiKeys.DELETE_TOPICS, req, req.timeout_ms, respond)

    # ------------------------------------------------------------------ CREATE_PARTITIONS (37)

    def handle_create_partitions(self, request: Request, req: m.CreatePartitionsRequest) -> None:
        """Alter on each topic (else TOPIC_AUTHORIZATION_FAILED for it), then forwarded to the controller."""
        names = [t.name for t in req.topics]
        allowed = self.auth.authorized_topics(request, AclOperation.ALTER, names)
        refused = [
            m.CreatePartitionsTopicResult(
                name=name,
                error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED),
                error_message=f"Principal {request.principal} is not authorized to Alter topic {name!r}",
            )
            for name in dict.fromkeys(names)
            if name not in allowed
        ]
        topics = [t for t in req.topics if t.name in allowed]
        if not topics:
            request.complete(to_body(m.CreatePartitionsResponse(results=refused)))
            return
        req.topics = topics

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            if answer is None:
                answer = to_body(
                    m.CreatePartitionsResponse(
                        results=[
                            m.CreatePartitionsTopicResult(name=n, error_code=int(error), error_message=why)
                            for n in dict.fromkeys(t.name for t in topics)
                        ]
                    )
                )
            answer["results"] = list(answer.get("results") or []) + [to_body(r) for r in refused]
            request.complete(answer)

        self._forward(request, ApiKeys.CREATE_PARTITIONS, req, req.timeout_ms, respond)

    # ------------------------------------------------------------------ DESCRIBE_CONFIGS (32)

    def handle_describe_configs(self, request: Request, req: m.DescribeConfigsRequest) -> None:
        """Topics are forwarded to the controller (it holds their configs); this broker's own BROKER resource
        (its id, or "" for the cluster's defaults) is answered here, as Kafka's broker does."""
        allowed: list[m.DescribeConfigsRequestResource] = []
        local: list[dict[str, Any]] = []
        refused: list[m.DescribeConfigsResponseResult] = []
        for r in req.resources:
            if r.resource_type == CONFIG_RESOURCE_BROKER:
                local.append(self._describe_broker(request, r))
            elif r.resource_type == m.CONFIG_RESOURCE_TOPIC and not self.auth.authorize(
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
        answered = local + [to_body(r) for r in refused]
        if not allowed:
            request.complete({"throttle_time_ms": 0, "results": answered})
            return
        req.resources = allowed

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            if answer is not None:
                self._fill_broker_synonyms(answer)
            if answer is None:
                answer = to_body(
                    m.DescribeConfigsResponse(
                        results=[
                            m.DescribeConfigsResponseResult(
                                error_code=int(error),
                                error_message=why,
                                resource_type=r.resource_type,
                                resource_name=r.resource_name,
                            )
                            for r in allowed
                        ]
                    )
                )
            answer["results"] = list(answer.get("results") or []) + answered
            request.complete(answer)

        self._forward(request, ApiKeys.DESCRIBE_CONFIGS, req, 0, respond)

    def _fill_broker_synonyms(self, answer: dict[str, Any]) -> None:
        """A topic config whose default is a broker key's (retention.ms: log.retention.ms/minutes/hours,
        segment.bytes: log.segment.bytes, max.message.bytes: message.max.bytes ...) and that the topic does
        not set takes this broker's value when its keys set it (STATIC_BROKER_CONFIG), as Kafka's broker
        describes a topic."""
        mine = self.topic_config_defaults
        for result in answer.get("results") or ():
            if result.get("resource_type") != m.CONFIG_RESOURCE_TOPIC:
                continue
            for config in result.get("configs") or ():
                found = mine.get(config.get("name", ""))
                if found is not None and config.get("config_source") == DEFAULT_CONFIG:
                    config.update(value=found[0], config_source=found[1], is_default=False)

    def _describe_broker(self, request: Request, r: m.DescribeConfigsRequestResource) -> dict[str, Any]:
        result: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        if r.resource_name not in ("", str(self.broker_id)):
            result["error_code"] = int(Errors.INVALID_REQUEST)
            result["error_message"] = f"Unexpected broker id, expected {self.broker_id} or empty string"
            return result
        if not self.auth.authorize(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
            result["error_code"] = int(Errors.CLUSTER_AUTHORIZATION_FAILED)
            result["error_message"] = f"Principal {request.principal} is not authorized to DescribeConfigs"
            return result
        # no keys, null or empty, means every key (Kafka's ConfigHelper.describeConfigs)
        wanted = set(r.configuration_keys) if r.configuration_keys else None
        result["configs"] = [
            {
                "name": e.name,
                "value": None if e.is_sensitive else e.value,
                "read_only": e.read_only,
                "config_source": e.config_source
                if e.config_source is not None
                else (DEFAULT_CONFIG if e.is_default else STATIC_BROKER_CONFIG),
                "is_default": e.is_default,
                "is_sensitive": e.is_sensitive,
                "config_type": e.config_type,
            }
            for e in self.broker_configs
            if wanted is None or e.name in wanted
        ]
        return result

    # ---------------------------------------------------- ALTER_CONFIGS (33), INCREMENTAL_ALTER_CONFIGS (44)

    def handle_alter_configs(self, request: Request, req: cfm.AlterConfigsRequest) -> None:
        self._handle_alter_configs(request, ApiKeys.ALTER_CONFIGS, req)

    def handle_incremental_alter_configs(
        self, request: Request, req: cfm.IncrementalAlterConfigsRequest
    ) -> None:
        self._handle_alter_configs(request, ApiKeys.INCREMENTAL_ALTER_CONFIGS, req)

    def _handle_alter_configs(
        self,
        request: Request,
        api_key: ApiKeys,
        req: cfm.AlterConfigsRequest | cfm.IncrementalAlterConfigsRequest,
    ) -> None:
        """AlterConfigs on each topic (else TOPIC_AUTHORIZATION_FAILED), on the cluster for a broker
        resource (else CLUSTER_AUTHORIZATION_FAILED); the rest is forwarded to the controller, which holds
        the configs and tells the brokers of a change (UPDATE_METADATA)."""
        kept: list[Any] = []
        refused: list[cfm.AlterConfigsResourceResponse] = []
        for r in req.resources:
            if r.resource_type == cfm.CONFIG_RESOURCE_BROKER:
                ok = self.auth.authorize(request, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
                error = Errors.CLUSTER_AUTHORIZATION_FAILED
                what = "the cluster"
            else:
                ok = r.resource_type != cfm.CONFIG_RESOURCE_TOPIC or self.auth.authorize(
                    request, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, r.resource_name
                )
                error = Errors.TOPIC_AUTHORIZATION_FAILED
                what = f"topic {r.resource_name!r}"
            if ok:
                kept.append(r)
            else:
                refused.append(
                    cfm.AlterConfigsResourceResponse(
                        error_code=int(error),
                        error_message=f"Principal {request.principal} is not authorized to AlterConfigs "
                        f"{what}",
                        resource_type=r.resource_type,
                        resource_name=r.resource_name,
                    )
                )
        if not kept:
            request.complete({"throttle_time_ms": 0, "responses": [to_body(r) for r in refused]})
            return
        req.resources = kept

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            if answer is None:
                answer = {
                    "throttle_time_ms": 0,
                    "responses": [
                        to_body(
                            cfm.AlterConfigsResourceResponse(
                                error_code=int(error),
                                error_message=why,
                                resource_type=r.resource_type,
                                resource_name=r.resource_name,
                            )
                        )
                        for r in kept
                    ],
                }
            answer["responses"] = list(answer.get("responses") or []) + [to_body(r) for r in refused]
            request.complete(answer)

        self._forward(request, api_key, req, 0, respond)

    # ------------------------------------------------------------------ DESCRIBE_QUORUM (55)

    def handle_describe_quorum(self, request: Request, req: rm.DescribeQuorumRequest) -> None:
        """Forwarded to the active controller, which leads the quorum (Kafka's broker forwards it too), after
        Describe on the cluster is checked here."""
        if not self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            why = f"Principal {request.principal} is not authorized to Describe the cluster"
            request.complete(error_body(Errors.CLUSTER_AUTHORIZATION_FAILED, why))
            return

        def respond(answer: dict[str, Any] | None, error: Errors, why: str) -> None:
            request.complete(answer if answer is not None else error_body(error, why))

        self._forward(request, ApiKeys.DESCRIBE_QUORUM, req, 0, respond)

    # ------------------------------------------------------------------ DESCRIBE_CLUSTER (60)

    def handle_describe_cluster(self, request: Request, req: m.DescribeClusterRequest) -> None:
        brokers = [
            m.DescribeClusterResponseBroker(broker_id=b.broker_id, host=b.host, port=b.port)
            for b in sorted(self.cache.brokers_on(request.listener_name), key=lambda b: b.broker_id)
        ]
        body = to_body(
            m.DescribeClusterResponse(
                # a live broker, as KRaft brokers answer clients (this one forwards, KIP-590)
                cluster_id=self.cluster_id,
                controller_id=self.broker_id,
                brokers=brokers,
            )
        )
        if req.include_cluster_authorized_operations:
            body["cluster_authorized_operations"] = self.auth.authorized_operations(
                request, ResourceType.CLUSTER
            )
        request.complete(body)

    # ------------------------------------------------------------------ auto-creation on METADATA

    def maybe_create_topics(
        self, request: Request, topics: list[m.MetadataResponseTopic]
    ) -> list[m.MetadataResponseTopic]:
        """Kafka's METADATA for topics that do not exist, when the client allows auto-creation: a valid name
        the principal may Create is created (forwarded, not waited for) and answered LEADER_NOT_AVAILABLE, so
        the client asks again; an invalid name is INVALID_TOPIC_EXCEPTION."""
        settings = self.auto_create
        unknown = [t for t in topics if t.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION]
        if not unknown or not settings.enable:
            return topics
        create: list[m.CreateTopicsRequestTopic] = []
        cluster_create = self.auth.authorize(request, AclOperation.CREATE, ResourceType.CLUSTER)
        for t in unknown:
            if t.name.startswith("__"):
                continue  # internal topics are made by their owners (the group coordinator), not here
            if not is_valid_topic_name(t.name):
                t.error_code = int(Errors.INVALID_TOPIC_EXCEPTION)
                continue
            if not cluster_create and not self.auth.authorize(
                request, AclOperation.CREATE, ResourceType.TOPIC, t.name
            ):
                continue  # stays UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers without Create
            t.error_code = int(Errors.LEADER_NOT_AVAILABLE)
            if t.name not in self.auto_created:
                create.append(
                    m.CreateTopicsRequestTopic(
                        name=t.name,
                        num_partitions=settings.num_partitions,
                        replication_factor=self._replication_factor(),
                    )
                )
        if create and self.forwarding is not None:
            names = [t.name for t in create]
            self.auto_created.update(names)
            log.info("broker %d: creating topics %s (auto.create.topics.enable)", self.broker_id, names)

            def done(answer: dict[str, Any] | None, why: str) -> None:
                self.auto_created.difference_update(names)  # asked again later if it did not happen
                if answer is None:
                    log.info("broker %d: auto-creation of %s not answered: %s", self.broker_id, names, why)

            self.forwarding.forward(
                ApiKeys.CREATE_TOPICS,
                m.CreateTopicsRequest(topics=create, timeout_ms=0),
                done,
                timeout_s=FORWARD_MARGIN_S,
            )
        return topics

    def _replication_factor(self) -> int:
        configured = self.auto_create.replication_factor
        if configured > 0:
            return configured
        return max(1, min(3, len(self.cache.brokers)))


__all__ = ["AdminApis", "AutoCreateSettings", "BrokerConfigEntry", "broker_config_entries"]


def broker_config_entries(
    values: dict[str, Any],
    defaults: dict[str, Any],
    dynamic: dict[str, dict[str, str]] | None = None,
    broker_id: int = -1,
) -> list[BrokerConfigEntry]:
    """A broker's settings for DescribeConfigs: every key with its value as Kafka writes it (booleans
    ``true``/``false``), whether it is the default, and passwords and JAAS configs hidden. ``dynamic``:
    the dynamic broker configs that apply ("" for every broker, ``broker_id``'s own), which win over the
    static value (sources DYNAMIC_DEFAULT_BROKER_CONFIG 3 and DYNAMIC_BROKER_CONFIG 2); the keys that may
    be changed so are not read-only."""
    dynamic = dynamic or {}
    cluster, own = dynamic.get("", {}), dynamic.get(str(broker_id), {})
    out: list[BrokerConfigEntry] = []
    for name in sorted(set(values) | set(cluster) | set(own)):
        value = values.get(name)
        text = None if value is None else (str(value).lower() if isinstance(value, bool) else str(value))
        sensitive = "password" in name or name.endswith(".jaas.config")
        source: int | None = None
        if name in own:
            text, source = own[name], cfm.CONFIG_SOURCE_DYNAMIC_BROKER
        elif name in cluster:
            text, source = cluster[name], cfm.CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER
        out.append(
            BrokerConfigEntry(
                name,
                text,
                source is None and value == defaults.get(name),
                sensitive,
                _config_type(name, value if source is None else 0),
                source,
                name not in cfm.DYNAMIC_BROKER_KEYS,
            )
        )
    return out


def _config_type(name: str, value: Any) -> int:
    """Kafka's ConfigType of a broker key, from its value (LONG for times and sizes, as Kafka's keys)."""
    if "password" in name:
        return 9
    if isinstance(value, bool):
        return 1
    if isinstance(value, int):
        return 5 if name.endswith((".ms", ".bytes")) else 3
    return 2
