"""Kafka's ``StandardAuthorizer``: is this principal, from this host, allowed this operation on this
resource?

The decision (Kafka's ``StandardAuthorizerData.authorize``):

1. a principal named in ``super.users`` (``User:admin;User:broker``) may do anything;
2. otherwise the ACLs whose resource pattern applies to the resource are looked at: a LITERAL pattern of
   the same name, the LITERAL wildcard ``*``, and every PREFIXED pattern the name starts with;
3. of those, an ACL applies when its principal is the request's or ``User:*``, its host is the client's
   address or ``*``, and its operation is the one asked, or ALL, or (for an ALLOW ACL only) one that
   implies it: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS;
4. a DENY that applies wins; else an ALLOW that applies allows; else, if no ACL at all names the
   resource, ``allow.everyone.if.no.acl.found`` decides (default false: denied); else denied.

Pure and synchronous: the broker's and the controller's request handlers call :meth:`authorize`; the ACLs
are replaced as a whole when the controller sends a new copy.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from server.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from server.security.principal import KafkaPrincipal

_IMPLIES_DESCRIBE = frozenset(
    {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


@dataclass(frozen=True, slots=True)
class Decision:
    """The result and why (for the audit log line): the ACL that decided, or the rule."""

    allowed: bool
    reason: str


class StandardAuthorizer:
    def __init__(
        self,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        acls: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourceType, list[AclBinding]] = {}
        self.replace_acls(acls)

    # ------------------------------------------------------------------ the ACLs

    def replace_acls(self, acls: Iterable[AclBinding]) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for binding in sorted(set(acls)):
            by_type.setdefault(binding.pattern.resource_type, []).append(binding)
        self._acls = by_type

    def acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        every = [b for bindings in self._acls.values() for b in bindings]
        return sorted(b for b in every if acl_filter is None or acl_filter.matches(b))

    # ------------------------------------------------------------------ deciding

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str = CLUSTER_NAME,
    ) -> bool:
        return self.decide(principal, host, operation, resource_type, resource_name).allowed

    def decide(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str = CLUSTER_NAME,
    ) -> Decision:
        name = str(principal)
        if name in self.super_users:
            return Decision(True, "super user")
        principals = (name, WILDCARD_PRINCIPAL)
        has_resource_acls = False
        allow: AclBinding | None = None
        for binding in self._acls.get(resource_type, ()):
            if not _pattern_applies(binding, resource_name):
                continue
            has_resource_acls = True
            result = _acl_result(binding, principals, host, operation)
            if result is AclPermissionType.DENY:
                return Decision(False, f"denied by {binding}")
            if result is AclPermissionType.ALLOW:
                allow = binding
        if allow is not None:
            return Decision(True, f"allowed by {allow}")
        if not has_resource_acls:
            allowed = self.allow_everyone_if_no_acl_found
            return Decision(allowed, f"no ACL for the resource (allow.everyone.if.no.acl.found={allowed})")
        return Decision(False, "no ACL allows it")


def _pattern_applies(binding: AclBinding, resource_name: str) -> bool:
    pattern = binding.pattern
    if pattern.pattern_type == PatternType.LITERAL:
        return pattern.name in (resource_name, WILDCARD_RESOURCE)
    if pattern.pattern_type == PatternType.PREFIXED:
        return resource_name.startswith(pattern.name)
    return False


def _acl_result(
    binding: AclBinding, principals: tuple[str, str], host: str, operation: AclOperation
) -> AclPermissionType | None:
    """ALLOW or DENY if the ACL applies to this principal, host and operation, else None (Kafka's
    ``StandardAuthorizerData.findResult``)."""
    entry = binding.entry
    if entry.principal not in principals:
        return None
    if entry.host != WILDCARD_HOST and entry.host != host:
        return None
    if entry.operation != AclOperation.ALL:
        if entry.permission_type == AclPermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if entry.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if entry.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != entry.operation:
                return None
        elif operation != entry.operation:
            return None
    if entry.permission_type in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return entry.permission_type
    return None


__all__ = [
    "Decision",
    "StandardAuthorizer",
    "parse_super_users",
]
