"""ACL bindings as Kafka has them: a resource pattern (type, name, LITERAL or PREFIXED) and an access
control entry (principal, host, operation, ALLOW or DENY), with Kafka's enum codes on the wire, its
filters (``AclBindingFilter``, used by DESCRIBE_ACLS and DELETE_ACLS) and the checks the controller makes
before it stores a new binding.

Pure data: no I/O. The authorizer (``server.security.authorizer``) decides with these; the controller's
security metadata (``server.security.security_metadata``) stores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from server.security.principal import KafkaPrincipal

CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource (Kafka's CLUSTER_NAME)
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
WILDCARD_PRINCIPAL = "User:*"

E = TypeVar("E", bound=IntEnum)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def camel(value: IntEnum) -> str:
    """Kafka's display name of an enum value: ``CLUSTER_ACTION`` -> ``ClusterAction``, ``TOPIC`` ->
    ``Topic`` (as kafka-acls prints them)."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_enum(cls: type[E], text: str) -> E:
    """``ClusterAction``, ``cluster_action``, ``CLUSTER-ACTION`` or ``9`` -> the member; ValueError names
    the choices."""
    key = text.strip().replace("-", "_")
    if key.isdigit():
        try:
            return cls(int(key))
        except ValueError:
            pass
    else:
        normalized = key.replace("_", "").upper()
        for member in cls:
            if member.name.replace("_", "") == normalized:
                return member
    choices = ", ".join(camel(m) for m in cls if m.name not in ("UNKNOWN",))
    raise ValueError(f"unknown {cls.__name__} {text!r}; one of: {choices}")


# Operations Kafka's AclCommand accepts per resource type (AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset(
        {
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.CREATE,
            AclOperation.DESCRIBE,
            AclOperation.DELETE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            AclOperation.CREATE,
            AclOperation.CLUSTER_ACTION,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
            AclOperation.IDEMPOTENT_WRITE,
            AclOperation.ALTER,
            AclOperation.DESCRIBE,
        }
    ),
}


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " + (
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str  # "User:alice" or "User:*"
    host: str  # an IP address or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"

    def to_json(self) -> dict[str, Any]:
        p, e = self.pattern, self.entry
        return {
            "resource_type": p.resource_type.name,
            "resource_name": p.name,
            "pattern_type": p.pattern_type.name,
            "principal": e.principal,
            "host": e.host,
            "operation": e.operation.name,
            "permission_type": e.permission_type.name,
        }

    def wire_fields(self) -> dict[str, Any]:
        """The binding as the ACL messages carry it (Kafka's numeric codes): ``SecurityAcl(**...)``."""
        p, e = self.pattern, self.entry
        return {
            "resource_type": int(p.resource_type),
            "resource_name": p.name,
            "pattern_type": int(p.pattern_type),
            "principal": e.principal,
            "host": e.host,
            "operation": int(e.operation),
            "permission_type": int(e.permission_type),
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AclBinding:
        return cls(
            ResourcePattern(
                ResourceType[value["resource_type"]],
                str(value["resource_name"]),
                PatternType[value["pattern_type"]],
            ),
            AccessControlEntry(
                str(value["principal"]),
                str(value["host"]),
                AclOperation[value["operation"]],
                AclPermissionType[value["permission_type"]],
            ),
        )


def validate_new_binding(binding: AclBinding) -> str | None:
    """Why the controller refuses to store ``binding`` (INVALID_REQUEST), or None (Kafka's
    ``AclControlManager.validateNewAcl`` and ``AclApis.validateAclBinding``)."""
    p, e = binding.pattern, binding.entry
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {p.pattern_type.name}"
    if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {p.resource_type.name}"
    if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {e.operation.name}"
    if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {e.permission_type.name}"
    if not p.name:
        return "Resource name should not be empty"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    try:
        KafkaPrincipal.parse(e.principal)
    except ValueError as exc:
        return f"Invalid principal: {exc}"
    if not e.host:
        return "Invalid empty host"
    return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: ``None`` (names, principal, host) and ANY match everything; a MATCH
    pattern type matches every pattern that would apply to the named resource (the LITERAL name, the
    LITERAL wildcard, PREFIXED prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def unknown_field(self) -> str | None:
        """The field that makes the filter unusable (an UNKNOWN value), or None."""
        for name, value in (
            ("resource_type", self.resource_type),
            ("pattern_type", self.pattern_type),
            ("operation", self.operation),
            ("permission_type", self.permission_type),
        ):
            if value.name == "UNKNOWN":
                return name
        return None

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding.pattern) and self._matches_entry(binding.entry)

    def _matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and (
            self.pattern_type != pattern.pattern_type
        ):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.resource_name == pattern.name
        # MATCH
        if pattern.pattern_type == PatternType.LITERAL:
            return pattern.name in (self.resource_name, WILDCARD_RESOURCE)
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.resource_name.startswith(pattern.name)
        return False

    def _matches_entry(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type in (AclPermissionType.ANY, entry.permission_type)


__all__ = [
    "CLUSTER_NAME",
    "SUPPORTED_OPERATIONS",
    "WILDCARD_HOST",
    "WILDCARD_PRINCIPAL",
    "WILDCARD_RESOURCE",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "camel",
    "parse_enum",
    "validate_new_binding",
]
