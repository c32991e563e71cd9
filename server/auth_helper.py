"""Kafka's ``AuthHelper``: how request handlers ask the authorizer about a request (its principal and
client address), with the error Kafka answers when the answer is no.

Without an authorizer (``authorizer.class.name`` empty) every question is answered yes: isrsim as it was.
Denials are logged at INFO as Kafka's authorizer logger logs them (principal, operation, host, resource,
the API and the rule that decided), at most once per 10 s for the same principal, operation and resource
(with the number not logged), so that a client retrying in a loop cannot fill the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from protocol import messages as m
from protocol.api_keys import ApiKeys
from protocol.api_specs import ApiSpec, Node
from protocol.errors import Errors, KafkaError
from server.config import ConfigValues, check_authorizer_class
from server.request_channel import Request
from server.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType, camel
from server.security.authorizer import StandardAuthorizer, parse_super_users

log = logging.getLogger("kafka.authorizer.logger")

DENIAL_LOG_INTERVAL_S = 10.0


class ClusterAuthorizationError(KafkaError):
    """CLUSTER_AUTHORIZATION_FAILED (31)."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.CLUSTER_AUTHORIZATION_FAILED, message)


def cluster_operation_of(spec: ApiSpec, node: Node) -> AclOperation | None:
    """What the principal needs on the cluster before ``node`` handles the API at all (its ApiSpec)."""
    serving = spec.on(node)
    if serving is None or serving.cluster_operation is None:
        return None
    return AclOperation[serving.cluster_operation]


def build_authorizer(config: ConfigValues) -> StandardAuthorizer | None:
    """The authorizer ``config`` asks for (its ACLs empty until loaded), or None when it is off."""
    if not check_authorizer_class(str(config.get("authorizer.class.name"))):
        return None
    return StandardAuthorizer(
        super_users=parse_super_users(str(config.get("super.users"))),
        allow_everyone_if_no_acl_found=bool(config.get("allow.everyone.if.no.acl.found")),
    )


def _api_name(request: Request) -> str:
    try:
        return ApiKeys(request.api_key).name
    except ValueError:
        return str(request.api_key)


class AuthHelper:
    def __init__(
        self,
        authorizer: StandardAuthorizer | None,
        node: str = "broker",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.authorizer = authorizer
        self.node = node
        self._clock = clock
        # (principal, operation, resource type, name) -> (when last logged, denials since not logged)
        self._denials: dict[tuple[str, int, int, str], tuple[float, int]] = {}

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def authorize(
        self,
        request: Request,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str = CLUSTER_NAME,
    ) -> bool:
        if self.authorizer is None:
            return True
        principal = request.principal
        host = request.connection.address
        decision = self.authorizer.decide(principal, host, operation, resource_type, resource_name)
        if not decision.allowed:
            key = (str(principal), int(operation), int(resource_type), resource_name)
            now = self._clock()
            last, unlogged = self._denials.get(key, (-DENIAL_LOG_INTERVAL_S, 0))
            if now - last < DENIAL_LOG_INTERVAL_S:
                self._denials[key] = (last, unlogged + 1)
            else:
                if len(self._denials) > 10_000:
                    self._denials.clear()
                self._denials[key] = (now, 0)
                log.info(
                    "%s: Principal = %s is Denied operation = %s from host = %s on resource = %s:%s for "
                    "request = %s (%s)%s",
                    self.node,
                    principal,
                    camel(operation),
                    host,
                    camel(resource_type),
                    resource_name,
                    _api_name(request),
                    decision.reason,
                    f"; {unlogged} more like it not logged" if unlogged else "",
                )
        return decision.allowed

    def authorized_operations(
        self, request: Request, resource_type: ResourceType, resource_name: str = CLUSTER_NAME
    ) -> int:
        """Kafka's ``authorizedOperations``: the operations the resource type supports that the principal
        may perform on the resource, as a bit field (bit N for the AclOperation code N); without an
        authorizer every supported operation. Denials are not logged (Kafka asks with logIfDenied off)."""
        supported = SUPPORTED_OPERATIONS.get(resource_type, frozenset())
        if self.authorizer is None:
            allowed: Iterable[AclOperation] = supported
        else:
            principal, host = request.principal, request.connection.address
            allowed = [
                op
                for op in supported
                if self.authorizer.decide(principal, host, op, resource_type, resource_name).allowed
            ]
        bits = 0
        for op in allowed:
            bits |= 1 << int(op)
        return bits

    def authorize_cluster_operation(self, request: Request, operation: AclOperation) -> None:
        """Raises CLUSTER_AUTHORIZATION_FAILED unless the request's principal may ``operation`` the
        cluster (Kafka's ``authorizeClusterOperation``)."""
        if not self.authorize(request, operation, ResourceType.CLUSTER):
            raise ClusterAuthorizationError(
                f"Principal {request.principal} is not authorized to {camel(operation)} on the cluster "
                f"({_api_name(request)} refused)"
            )

    def net_faults_check(self, request: Request) -> str | None:
        """NET_FAULTS (isrsim's own API, answered by the socket server) changes how the node's links
        behave: it needs Alter on the cluster. None when allowed, else the refusal's message."""
        try:
            self.authorize_cluster_operation(request, AclOperation.ALTER)
        except ClusterAuthorizationError as exc:
            return exc.message
        return None

    def authorized_topics(self, request: Request, operation: AclOperation, names: Iterable[str]) -> set[str]:
        """The names among ``names`` the principal may ``operation`` (Kafka's ``filterByAuthorized``)."""
        if self.authorizer is None:
            return set(names)
        return {n for n in set(names) if self.authorize(request, operation, ResourceType.TOPIC, n)}

    def filter_metadata_topics(
        self, request: Request, named: bool, topics: list[m.MetadataResponseTopic]
    ) -> list[m.MetadataResponseTopic]:
        """METADATA as Kafka answers it: asked for every topic, only the topics the principal may Describe
        are listed; a named topic it may not Describe is answered TOPIC_AUTHORIZATION_FAILED with no
        partitions (whether it exists or not, so existence does not leak)."""
        if self.authorizer is None:
            return topics
        allowed = self.authorized_topics(request, AclOperation.DESCRIBE, (t.name for t in topics))
        if not named:
            return [t for t in topics if t.name in allowed]
        return [
            t
            if t.name in allowed
            else m.MetadataResponseTopic(error_code=int(Errors.TOPIC_AUTHORIZATION_FAILED), name=t.name)
            for t in topics
        ]


def topic_denied_message(request: Request, operation: AclOperation, topic: str) -> str:
    return f"Principal {request.principal} is not authorized to {camel(operation)} topic {topic!r}"


ALLOW_ALL = AuthHelper(None)

__all__ = [
    "ALLOW_ALL",
    "AuthHelper",
    "ClusterAuthorizationError",
    "build_authorizer",
    "topic_denied_message",
]
