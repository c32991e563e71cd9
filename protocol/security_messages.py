"""Bodies of the security metadata APIs, with Kafka's field names (its JSON schemas in snake_case), all
version 0, served by the controller, which owns the cluster's ACLs and SCRAM credentials:

DESCRIBE_ACLS (29)
    ``{resource_type_filter, resource_name_filter?, pattern_type_filter, principal_filter?, host_filter?,
    operation, permission_type}`` -> ``{throttle_time_ms, error_code, error_message, resources[{resource_type,
    resource_name, pattern_type, acls[{principal, host, operation, permission_type}]}]}``.
CREATE_ACLS (30)
    ``{creations[{resource_type, resource_name, resource_pattern_type, principal, host, operation,
    permission_type}]}`` -> ``{throttle_time_ms, results[{error_code, error_message}]}`` (one per creation).
DELETE_ACLS (31)
    ``{filters[...as DESCRIBE_ACLS]}`` -> ``{throttle_time_ms, filter_results[{error_code, error_message,
    matching_acls[{error_code, error_message, resource_type, resource_name, pattern_type, principal, host,
    operation, permission_type}]}]}``.
DESCRIBE_USER_SCRAM_CREDENTIALS (50)
    ``{users: [{name}] | nil}`` -> ``{throttle_time_ms, error_code, error_message, results[{user, error_code,
    error_message, credential_infos[{mechanism, iterations}]}]}``.
ALTER_USER_SCRAM_CREDENTIALS (51)
    ``{deletions[{name, mechanism}], upsertions[{name, mechanism, iterations, salt, salted_password}]}`` ->
    ``{throttle_time_ms, results[{user, error_code, error_message}]}``. As in Kafka the client salts and
    hashes the password (``salted_password`` = PBKDF2-HMAC-SHA-256); the password never travels.

Enum fields carry Kafka's codes (``ResourceType`` TOPIC=2 GROUP=3 CLUSTER=4, ``PatternType`` ANY=1 MATCH=2
LITERAL=3 PREFIXED=4, ``AclOperation`` ALL=2 READ=3 ... CLUSTER_ACTION=9, ``AclPermissionType`` ANY=1
DENY=2 ALLOW=3, SCRAM mechanism SCRAM-SHA-256=1).

``UpdateMetadataSecurity`` is isrsim's: the copy of the ACLs and credentials the controller sends brokers
in UPDATE_METADATA's optional ``security`` field (docs/protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from protocol.schema import Int8, Int16, Int32, Int64

# ---------------------------------------------------------------------------------- DESCRIBE_ACLS (29)


@dataclass(slots=True, kw_only=True)
class DescribeAclsRequest:
    resource_type_filter: Int8
    resource_name_filter: str | None = None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class AclDescription:
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class DescribeAclsResource:
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    acls: list[AclDescription] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeAclsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    resources: list[DescribeAclsResource] = field(default_factory=list)


# ------------------------------------------------------------------------------------ CREATE_ACLS (30)


@dataclass(slots=True, kw_only=True)
class AclCreation:
    resource_type: Int8
    resource_name: str
    resource_pattern_type: Int8 = 3
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class CreateAclsRequest:
    creations: list[AclCreation]


@dataclass(slots=True, kw_only=True)
class AclCreationResult:
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class CreateAclsResponse:
    throttle_time_ms: Int32 = 0
    results: list[AclCreationResult] = field(default_factory=list)


# ------------------------------------------------------------------------------------ DELETE_ACLS (31)


@dataclass(slots=True, kw_only=True)
class DeleteAclsFilter:
    resource_type_filter: Int8
    resource_name_filter: str | None = None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None = None
    host_filter: str | None = None
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class DeleteAclsRequest:
    filters: list[DeleteAclsFilter]


@dataclass(slots=True, kw_only=True)
class DeleteAclsMatchingAcl:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class DeleteAclsFilterResult:
    error_code: Int16 = 0
    error_message: str | None = None
    matching_acls: list[DeleteAclsMatchingAcl] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DeleteAclsResponse:
    throttle_time_ms: Int32 = 0
    filter_results: list[DeleteAclsFilterResult] = field(default_factory=list)


# ------------------------------------------------------------------ DESCRIBE_USER_SCRAM_CREDENTIALS (50)


@dataclass(slots=True, kw_only=True)
class UserName:
    name: str


@dataclass(slots=True, kw_only=True)
class DescribeUserScramCredentialsRequest:
    users: list[UserName] | None = None


@dataclass(slots=True, kw_only=True)
class CredentialInfo:
    mechanism: Int8
    iterations: Int32


@dataclass(slots=True, kw_only=True)
class DescribeUserScramCredentialsResult:
    user: str
    error_code: Int16 = 0
    error_message: str | None = None
    credential_infos: list[CredentialInfo] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class DescribeUserScramCredentialsResponse:
    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: str | None = None
    results: list[DescribeUserScramCredentialsResult] = field(default_factory=list)


# --------------------------------------------------------------------- ALTER_USER_SCRAM_CREDENTIALS (51)


@dataclass(slots=True, kw_only=True)
class ScramCredentialDeletion:
    name: str
    mechanism: Int8


@dataclass(slots=True, kw_only=True)
class ScramCredentialUpsertion:
    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    salted_password: bytes


@dataclass(slots=True, kw_only=True)
class AlterUserScramCredentialsRequest:
    deletions: list[ScramCredentialDeletion] = field(default_factory=list)
    upsertions: list[ScramCredentialUpsertion] = field(default_factory=list)


@dataclass(slots=True, kw_only=True)
class AlterUserScramCredentialsResult:
    user: str
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(slots=True, kw_only=True)
class AlterUserScramCredentialsResponse:
    throttle_time_ms: Int32 = 0
    results: list[AlterUserScramCredentialsResult] = field(default_factory=list)


# ------------------------------------------------------------- UPDATE_METADATA's security (isrsim's)


@dataclass(slots=True, kw_only=True)
class SecurityAcl:
    resource_type: Int8
    resource_name: str
    pattern_type: Int8
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@dataclass(slots=True, kw_only=True)
class SecurityScramCredential:
    name: str
    mechanism: Int8
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: Int32


@dataclass(slots=True, kw_only=True)
class UpdateMetadataSecurity:
    """Every ACL and SCRAM credential of the cluster as of ``version`` (which rises with every change the
    controller makes); a broker keeps the last copy it got."""

    version: Int64 = field(metadata={"min": 0})
    acls: list[SecurityAcl] = field(default_factory=list)
    scram_credentials: list[SecurityScramCredential] = field(default_factory=list)
