"""The authorizer's decisions, after Kafka's StandardAuthorizerTest and AclAuthorizerTest: super users,
the no-ACL rule, principals and hosts (with their wildcards), LITERAL / wildcard / PREFIXED patterns,
DENY winning, ALL and the implied operations; then the ACL filters and the checks on a new binding."""

from __future__ import annotations

import pytest

from server.config import check_authorizer_class
from server.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    camel,
    parse_enum,
    validate_new_binding,
)
from server.security.authorizer import StandardAuthorizer, parse_super_users
from server.security.principal import ANONYMOUS, KafkaPrincipal

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "192.168.0.1"
OTHER_HOST = "192.168.0.2"

Op = AclOperation
RT = ResourceType
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY


def acl(
    principal: str,
    op: AclOperation,
    permission: AclPermissionType = ALLOW,
    *,
    resource_type: ResourceType = RT.TOPIC,
    name: str = "foo",
    pattern: PatternType = PatternType.LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, pattern), AccessControlEntry(principal, host, op, permission)
    )


def can(
    authz: StandardAuthorizer,
    principal: KafkaPrincipal,
    op: AclOperation,
    name: str = "foo",
    *,
    resource_type: ResourceType = RT.TOPIC,
    host: str = HOST,
) -> bool:
    return authz.authorize(principal, host, op, resource_type, name)


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not can(StandardAuthorizer(), ALICE, Op.READ)
    everyone = StandardAuthorizer(allow_everyone_if_no_acl_found=True)
    assert can(everyone, ALICE, Op.READ)
    assert can(everyone, ANONYMOUS, Op.CLUSTER_ACTION, CLUSTER_NAME, resource_type=RT.CLUSTER)


def test_allow_everyone_does_not_apply_to_a_resource_with_acls() -> None:
    authz = StandardAuthorizer(allow_everyone_if_no_acl_found=True, acls=[acl("User:bob", Op.READ)])
    assert can(authz, BOB, Op.READ)
    assert not can(authz, ALICE, Op.READ)  # the topic has an ACL, just not for alice
    assert can(authz, ALICE, Op.READ, "bar")  # another topic has none


def test_super_users_may_do_anything_even_when_denied() -> None:
    authz = StandardAuthorizer(
        super_users=parse_super_users("User:admin; User:broker"),
        acls=[acl("User:*", Op.ALL, DENY), acl("User:*", Op.ALL, DENY, resource_type=RT.CLUSTER, name="*")],
    )
    admin = KafkaPrincipal("User", "admin")
    assert can(authz, admin, Op.WRITE)
    assert can(
        authz, KafkaPrincipal("User", "broker"), Op.CLUSTER_ACTION, CLUSTER_NAME, resource_type=RT.CLUSTER
    )
    assert not can(authz, ALICE, Op.WRITE)


def test_super_users_are_matched_by_type_and_name() -> None:
    authz = StandardAuthorizer(super_users=parse_super_users("User:admin"))
    assert not can(authz, KafkaPrincipal("Group", "admin"), Op.READ)
    assert parse_super_users(" ;User:a;;User:b ; ") == {"User:a", "User:b"}


def test_principal_must_match_or_be_the_wildcard() -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.READ)])
    assert can(authz, ALICE, Op.READ)
    assert not can(authz, BOB, Op.READ)
    assert not can(authz, ANONYMOUS, Op.READ)
    everyone = StandardAuthorizer(acls=[acl("User:*", Op.READ)])
    assert can(everyone, BOB, Op.READ)
    assert can(everyone, ANONYMOUS, Op.READ)


def test_host_must_match_or_be_the_wildcard() -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.READ, host=HOST)])
    assert can(authz, ALICE, Op.READ, host=HOST)
    assert not can(authz, ALICE, Op.READ, host=OTHER_HOST)


def test_deny_wins_over_allow() -> None:
    authz = StandardAuthorizer(
        acls=[
            acl("User:alice", Op.READ),
            acl("User:*", Op.READ, DENY, host=OTHER_HOST),
            acl("User:alice", Op.WRITE),
            acl("User:alice", Op.WRITE, DENY, name="*"),
        ]
    )
    assert can(authz, ALICE, Op.READ, host=HOST)
    assert not can(authz, ALICE, Op.READ, host=OTHER_HOST)
    assert not can(authz, ALICE, Op.WRITE)  # a wildcard DENY beats a literal ALLOW


def test_all_allows_and_denies_every_operation() -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.ALL), acl("User:bob", Op.ALL, DENY)])
    for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DELETE, Op.ALTER_CONFIGS, Op.CREATE):
        assert can(authz, ALICE, op)
        assert not can(authz, BOB, op)


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_alter_imply_describe(granted: AclOperation) -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", granted)])
    assert can(authz, ALICE, Op.DESCRIBE)
    assert not can(authz, ALICE, Op.DESCRIBE_CONFIGS)


def test_implied_operations_go_one_way_only() -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.WRITE), acl("User:alice", Op.ALTER_CONFIGS)])
    assert can(authz, ALICE, Op.WRITE)
    assert not can(authz, ALICE, Op.READ)  # WRITE does not give READ
    assert can(authz, ALICE, Op.DESCRIBE_CONFIGS)
    assert not can(authz, ALICE, Op.CREATE)
    describe_only = StandardAuthorizer(acls=[acl("User:alice", Op.DESCRIBE)])
    assert not can(describe_only, ALICE, Op.READ)


def test_a_deny_does_not_imply() -> None:
    """Kafka: a DENY of READ does not deny DESCRIBE; only a DENY of DESCRIBE (or ALL) does."""
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.WRITE), acl("User:alice", Op.READ, DENY)])
    assert can(authz, ALICE, Op.DESCRIBE)
    assert not can(authz, ALICE, Op.READ)
    denied = StandardAuthorizer(acls=[acl("User:alice", Op.WRITE), acl("User:alice", Op.DESCRIBE, DENY)])
    assert not can(denied, ALICE, Op.DESCRIBE)
    assert can(denied, ALICE, Op.WRITE)


def test_literal_wildcard_and_prefixed_patterns() -> None:
    authz = StandardAuthorizer(
        acls=[
            acl("User:alice", Op.READ, name="orders", pattern=PatternType.PREFIXED),
            acl("User:alice", Op.WRITE, name="*"),
            acl("User:alice", Op.DELETE, name="exact"),
        ]
    )
    assert can(authz, ALICE, Op.READ, "orders")
    assert can(authz, ALICE, Op.READ, "orders-eu")
    assert not can(authz, ALICE, Op.READ, "order")
    assert not can(authz, ALICE, Op.READ, "my-orders")
    assert can(authz, ALICE, Op.WRITE, "anything")
    assert can(authz, ALICE, Op.DELETE, "exact")
    assert not can(authz, ALICE, Op.DELETE, "exactly")  # a LITERAL name is not a prefix
    # A topic wildcard says nothing of the cluster or of groups.
    assert not can(authz, ALICE, Op.WRITE, CLUSTER_NAME, resource_type=RT.CLUSTER)
    assert not can(authz, ALICE, Op.READ, "orders", resource_type=RT.GROUP)


def test_a_prefixed_deny_beats_a_literal_allow() -> None:
    authz = StandardAuthorizer(
        acls=[
            acl("User:*", Op.WRITE, name="secret-topic"),
            acl("User:bob", Op.ALL, DENY, name="secret", pattern=PatternType.PREFIXED),
        ]
    )
    assert can(authz, ALICE, Op.WRITE, "secret-topic")
    assert not can(authz, BOB, Op.WRITE, "secret-topic")


def test_cluster_action_on_the_cluster() -> None:
    authz = StandardAuthorizer(
        acls=[acl("User:broker", Op.CLUSTER_ACTION, resource_type=RT.CLUSTER, name=CLUSTER_NAME)]
    )
    broker = KafkaPrincipal("User", "broker")
    assert can(authz, broker, Op.CLUSTER_ACTION, CLUSTER_NAME, resource_type=RT.CLUSTER)
    assert not can(authz, ALICE, Op.CLUSTER_ACTION, CLUSTER_NAME, resource_type=RT.CLUSTER)
    assert not can(authz, broker, Op.ALTER, CLUSTER_NAME, resource_type=RT.CLUSTER)


def test_replace_acls_takes_the_new_set_whole() -> None:
    authz = StandardAuthorizer(acls=[acl("User:alice", Op.READ)])
    authz.replace_acls([acl("User:bob", Op.READ)])
    assert not can(authz, ALICE, Op.READ)
    assert can(authz, BOB, Op.READ)
    assert authz.acls() == [acl("User:bob", Op.READ)]


def test_decision_names_the_acl() -> None:
    deny = acl("User:alice", Op.READ, DENY)
    decision = StandardAuthorizer(acls=[deny]).decide(ALICE, HOST, Op.READ, RT.TOPIC, "foo")
    assert not decision.allowed
    assert "DENY" in decision.reason and "alice" in decision.reason


# ---------------------------------------------------------------------------------------- filters


BINDINGS = [
    acl("User:alice", Op.READ, name="foo"),
    acl("User:alice", Op.WRITE, name="*"),
    acl("User:bob", Op.READ, name="fo", pattern=PatternType.PREFIXED),
    acl("User:bob", Op.READ, DENY, name="bar"),
    acl("User:bob", Op.CLUSTER_ACTION, resource_type=RT.CLUSTER, name=CLUSTER_NAME),
]


def matching(f: AclBindingFilter) -> list[AclBinding]:
    return [b for b in BINDINGS if f.matches(b)]


def test_filter_any_matches_everything() -> None:
    assert matching(AclBindingFilter()) == BINDINGS


def test_filter_literal_and_prefixed_match_exactly() -> None:
    assert matching(AclBindingFilter(resource_name="foo", pattern_type=PatternType.LITERAL)) == [BINDINGS[0]]
    assert matching(AclBindingFilter(resource_name="fo", pattern_type=PatternType.PREFIXED)) == [BINDINGS[2]]
    assert matching(AclBindingFilter(resource_name="foo", pattern_type=PatternType.PREFIXED)) == []
    # ANY with a name: the patterns of exactly that name, whatever their type
    assert matching(AclBindingFilter(resource_name="*")) == [BINDINGS[1]]


def test_filter_match_finds_every_pattern_that_applies() -> None:
    found = matching(
        AclBindingFilter(resource_type=RT.TOPIC, resource_name="foo", pattern_type=PatternType.MATCH)
    )
    assert found == BINDINGS[:3]


def test_filter_on_entry_fields() -> None:
    assert matching(AclBindingFilter(principal="User:bob", operation=Op.READ)) == BINDINGS[2:4]
    assert matching(AclBindingFilter(permission_type=DENY)) == [BINDINGS[3]]
    assert matching(AclBindingFilter(resource_type=RT.CLUSTER)) == [BINDINGS[4]]
    assert matching(AclBindingFilter(host="10.0.0.1")) == []


def test_filter_unknown_field() -> None:
    assert AclBindingFilter().unknown_field() is None
    assert AclBindingFilter(operation=Op.UNKNOWN).unknown_field() == "operation"


# ---------------------------------------------------------------------------------------- new bindings


@pytest.mark.parametrize(
    ("binding", "problem"),
    [
        (acl("User:a", Op.READ, pattern=PatternType.MATCH), "patternType"),
        (acl("User:a", Op.READ, pattern=PatternType.ANY), "patternType"),
        (acl("User:a", Op.READ, resource_type=RT.ANY), "resourceType"),
        (acl("User:a", Op.ANY), "operation"),
        (acl("User:a", Op.READ, AclPermissionType.ANY), "permissionType"),
        (acl("User:a", Op.READ, name=""), "empty"),
        (acl("User:a", Op.ALTER, resource_type=RT.CLUSTER, name="other"), "kafka-cluster"),
        (acl("alice", Op.READ), "principal"),
        (acl("User:a", Op.READ, host=""), "host"),
    ],
)
def test_validate_new_binding_refuses(binding: AclBinding, problem: str) -> None:
    message = validate_new_binding(binding)
    assert message is not None and problem in message


def test_validate_new_binding_accepts() -> None:
    assert validate_new_binding(acl("User:*", Op.ALL, name="t", pattern=PatternType.PREFIXED)) is None
    assert validate_new_binding(acl("User:a", Op.ALTER, resource_type=RT.CLUSTER, name=CLUSTER_NAME)) is None


def test_binding_json_round_trip() -> None:
    for b in BINDINGS:
        assert AclBinding.from_json(b.to_json()) == b


def test_enum_names_as_kafka_acls_prints_and_parses_them() -> None:
    assert camel(Op.CLUSTER_ACTION) == "ClusterAction"
    assert parse_enum(AclOperation, "ClusterAction") is Op.CLUSTER_ACTION
    assert parse_enum(AclOperation, "describe-configs") is Op.DESCRIBE_CONFIGS
    assert parse_enum(PatternType, "prefixed") is PatternType.PREFIXED
    with pytest.raises(ValueError, match="unknown AclOperation 'Fly'"):
        parse_enum(AclOperation, "Fly")


def test_authorizer_class_name() -> None:
    assert not check_authorizer_class("")
    assert check_authorizer_class("org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert check_authorizer_class("kafka.security.authorizer.AclAuthorizer")
    with pytest.raises(ValueError, match="not supported"):
        check_authorizer_class("com.example.Mine")
