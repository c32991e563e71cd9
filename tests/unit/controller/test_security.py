"""The controller's ACLs and SCRAM credentials: ``SecurityControl`` answering Kafka's five APIs (after
Kafka's AclControlManagerTest and ScramControlManagerTest), then the controller shell on loopback: the
APIs authorized (31), SECURITY_DISABLED without an authorizer, the copy saved 0600 and loaded again at
restart, and sent to a registered broker in UPDATE_METADATA.

Over plain TCP every connection is ``User:ANONYMOUS``; the shell tests make that principal a super user
(or not) to take both paths."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from controller.config import ControllerConfig
from controller.controller import KafkaController
from controller.security_control import SecurityControl
from protocol import security_messages as sm
from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from protocol.schema import from_body, to_body
from server.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from server.security.credentials import ScramCredential
from server.security.security_metadata import SecurityMetadata, salted_password

from .test_shell import call, fake_broker, managed, wait_for

TOPIC, CLUSTER = int(ResourceType.TOPIC), int(ResourceType.CLUSTER)
LITERAL, PREFIXED, MATCH, ANY = (
    int(p) for p in (PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY)
)
READ, WRITE, ALTER, ANY_OP = (
    int(o) for o in (AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER, AclOperation.ANY)
)
ALLOW, DENY, ANY_PERM = (
    int(p) for p in (AclPermissionType.ALLOW, AclPermissionType.DENY, AclPermissionType.ANY)
)
SHA256 = 1


def creation(principal: str = "User:alice", op: int = WRITE, name: str = "t", **kw: Any) -> sm.AclCreation:
    fields: dict[str, Any] = {
        "resource_type": TOPIC,
        "resource_name": name,
        "resource_pattern_type": LITERAL,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": ALLOW,
    }
    fields.update(kw)
    return sm.AclCreation(**fields)


def describe_all(**kw: Any) -> sm.DescribeAclsRequest:
    fields: dict[str, Any] = {
        "resource_type_filter": int(ResourceType.ANY),
        "pattern_type_filter": ANY,
        "operation": ANY_OP,
        "permission_type": ANY_PERM,
    }
    fields.update(kw)
    return sm.DescribeAclsRequest(**fields)


def upsertion(
    name: str, password: str, iterations: int = 4096, mechanism: int = SHA256
) -> sm.ScramCredentialUpsertion:
    salt = os.urandom(16)
    return sm.ScramCredentialUpsertion(
        name=name,
        mechanism=mechanism,
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(password, salt, iterations),
    )


# ----------------------------------------------------------------------------------------- ACLs


def test_create_describe_delete_acls() -> None:
    control = SecurityControl(SecurityMetadata())
    resp, changed = control.create_acls(
        sm.CreateAclsRequest(
            creations=[
                creation(),
                creation(op=READ, name="orders", resource_pattern_type=PREFIXED),
                creation("User:bob", READ, permission_type=DENY),
            ]
        )
    )
    assert changed and [r.error_code for r in resp.results] == [0, 0, 0]
    assert control.metadata.version == 1
    # Creating what exists already is a success that changes nothing.
    again, changed = control.create_acls(sm.CreateAclsRequest(creations=[creation()]))
    assert not changed and again.results[0].error_code == 0 and control.metadata.version == 1

    everything = control.describe_acls(describe_all())
    assert [(r.resource_name, r.pattern_type, len(r.acls)) for r in everything.resources] == [
        ("orders", PREFIXED, 1),
        ("t", LITERAL, 2),
    ]
    # MATCH: every ACL that applies to topic orders-eu.
    applies = control.describe_acls(
        describe_all(resource_type_filter=TOPIC, resource_name_filter="orders-eu", pattern_type_filter=MATCH)
    )
    assert [r.resource_name for r in applies.resources] == ["orders"]

    deleted, changed = control.delete_acls(
        sm.DeleteAclsRequest(
            filters=[
                sm.DeleteAclsFilter(
                    resource_type_filter=TOPIC,
                    resource_name_filter="t",
                    pattern_type_filter=LITERAL,
                    principal_filter="User:bob",
                    operation=ANY_OP,
                    permission_type=ANY_PERM,
                )
            ]
        )
    )
    assert changed and control.metadata.version == 2
    [result] = deleted.filter_results
    assert [(a.principal, a.permission_type) for a in result.matching_acls] == [("User:bob", DENY)]
    assert len(control.metadata.acls) == 2


@pytest.mark.parametrize(
    ("bad", "text"),
    [
        (creation(resource_type=CLUSTER, name="t", op=ALTER), "kafka-cluster"),
        (creation(resource_pattern_type=MATCH), "patternType"),
        (creation(op=ANY_OP), "operation"),
        (creation(principal="alice"), "principal"),
        (creation(name=""), "empty"),
        (creation(op=99), "unknown operation 99"),
    ],
)
def test_create_acls_refuses_bad_bindings_one_by_one(bad: sm.AclCreation, text: str) -> None:
    control = SecurityControl(SecurityMetadata())
    resp, changed = control.create_acls(sm.CreateAclsRequest(creations=[bad, creation()]))
    assert [r.error_code for r in resp.results] == [Errors.INVALID_REQUEST, 0]
    assert resp.results[0].error_message is not None and text in resp.results[0].error_message
    assert changed and len(control.metadata.acls) == 1


def test_filters_with_unknown_fields_are_invalid() -> None:
    control = SecurityControl(SecurityMetadata())
    assert control.describe_acls(describe_all(operation=0)).error_code == Errors.INVALID_REQUEST
    resp, changed = control.delete_acls(
        sm.DeleteAclsRequest(
            filters=[sm.DeleteAclsFilter(resource_type_filter=0, operation=ANY_OP, permission_type=ANY_PERM)]
        )
    )
    assert resp.filter_results[0].error_code == Errors.INVALID_REQUEST and not changed


# ----------------------------------------------------------------------------------------- SCRAM


def test_upserted_credentials_are_those_scram_derives_from_the_password() -> None:
    control = SecurityControl(SecurityMetadata())
    up = upsertion("alice", "alice-secret", iterations=8192)
    resp, changed = control.alter_scram_credentials(sm.AlterUserScramCredentialsRequest(upsertions=[up]))
    assert changed and resp.results[0].error_code == 0
    stored = control.metadata.credentials.get("alice")
    assert stored == ScramCredential(*_scramp_keys("alice-secret", up.salt, 8192))
    assert stored is not None and stored.matches_password("alice-secret")
    assert not stored.matches_password("wrong")


def test_the_metadata_record_copy_round_trips_salted_credentials_and_acls() -> None:
    """What a controller quorum's ControllerState record carries (msgpack, as the metadata log encodes it):
    the same ACLs and credentials come back, and the password itself is nowhere in it."""
    import msgpack

    from raft.records import decode_record, encode_record

    control = SecurityControl(SecurityMetadata())
    control.alter_scram_credentials(
        sm.AlterUserScramCredentialsRequest(upsertions=[upsertion("bob", "bob-secret-pw")])
    )
    control.create_acls(sm.CreateAclsRequest(creations=[creation("User:bob", READ, "bobs")]))
    original = control.metadata
    value = encode_record("ControllerState", decisions=["state"], state={}, security=original.to_json())
    assert b"bob-secret-pw" not in value
    raw = decode_record(value)["security"]
    back = SecurityMetadata.from_json(raw)
    assert back.version == original.version == 2
    assert back.acls == original.acls
    assert list(back.credentials.users()) == list(original.credentials.users())
    stored = back.credentials.get("bob")
    assert stored is not None and stored.matches_password("bob-secret-pw")
    # The decoded record equals a fresh copy's form: a voter can tell that it already holds it.
    assert raw == back.to_json()
    assert msgpack.unpackb(msgpack.packb(back.to_json()), raw=False) == raw
    # A copy is independent of the working metadata.
    copy = original.copy()
    control.alter_scram_credentials(
        sm.AlterUserScramCredentialsRequest(deletions=[sm.ScramCredentialDeletion(name="bob", mechanism=1)])
    )
    assert copy.credentials.get("bob") is not None and original.credentials.get("bob") is None
    with pytest.raises(ValueError, match="not a security metadata record"):
        SecurityMetadata.from_json({"version": 1, "acls": [{"resource_type": "NOPE"}]})


def test_a_quorum_security_change_is_a_record_to_commit() -> None:
    """With ``record`` (a controller quorum) a new copy of the ACLs and credentials makes the core's state
    dirty, so the change is appended to the metadata log; a single controller's is not a state change."""
    from .support import make_core

    message = SecurityMetadata(version=3).to_message()
    single = make_core()
    single.security_changed(message)
    assert not single.drain().dirty and single.security == message
    quorum = make_core()
    quorum.security_changed(message, record=True)
    assert quorum.drain().dirty and quorum.security == message


def _scramp_keys(password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes, int]:
    import scramp

    return scramp.ScramMechanism("SCRAM-SHA-256").make_auth_info(
        password, iteration_count=iterations, salt=salt
    )  # type: ignore[no-any-return]


def test_describe_scram_credentials() -> None:
    control = SecurityControl(SecurityMetadata())
    control.alter_scram_credentials(
        sm.AlterUserScramCredentialsRequest(upsertions=[upsertion("alice", "a"), upsertion("bob", "b")])
    )
    every = control.describe_scram_credentials(sm.DescribeUserScramCredentialsRequest(users=None))
    assert [(r.user, [(i.mechanism, i.iterations) for i in r.credential_infos]) for r in every.results] == [
        ("alice", [(SHA256, 4096)]),
        ("bob", [(SHA256, 4096)]),
    ]
    named = control.describe_scram_credentials(
        sm.DescribeUserScramCredentialsRequest(
            users=[sm.UserName(name=n) for n in ("alice", "carol", "bob", "bob")]
        )
    )
    assert [(r.user, r.error_code) for r in named.results] == [
        ("alice", 0),
        ("carol", Errors.RESOURCE_NOT_FOUND),
        ("bob", Errors.DUPLICATE_RESOURCE),
    ]


def test_alter_scram_credentials_errors_per_user() -> None:
    control = SecurityControl(SecurityMetadata())
    control.alter_scram_credentials(sm.AlterUserScramCredentialsRequest(upsertions=[upsertion("alice", "a")]))
    resp, changed = control.alter_scram_credentials(
        sm.AlterUserScramCredentialsRequest(
            deletions=[
                sm.ScramCredentialDeletion(name="nobody", mechanism=SHA256),
                sm.ScramCredentialDeletion(name="alice", mechanism=SHA256),
            ],
            upsertions=[
                upsertion("", "x"),
                upsertion("few", "x", iterations=100),
                upsertion("many", "x", iterations=1_000_000),
                upsertion("sha512", "x", mechanism=2),
                upsertion("alice", "again"),  # alice twice with one mechanism: neither change applies
                upsertion("dave", "d"),
            ],
        )
    )
    assert {r.user: r.error_code for r in resp.results} == {
        "nobody": Errors.RESOURCE_NOT_FOUND,
        "alice": Errors.DUPLICATE_RESOURCE,
        "": Errors.UNACCEPTABLE_CREDENTIAL,
        "few": Errors.UNACCEPTABLE_CREDENTIAL,
        "many": Errors.UNACCEPTABLE_CREDENTIAL,
        "sha512": Errors.UNSUPPORTED_SASL_MECHANISM,
        "dave": 0,
    }
    assert changed
    alice = control.metadata.credentials.get("alice")
    assert alice is not None and alice.matches_password("a")
    assert [u for u, _, _ in control.metadata.credentials.users()] == ["alice", "dave"]
    deleted, _ = control.alter_scram_credentials(
        sm.AlterUserScramCredentialsRequest(
            deletions=[sm.ScramCredentialDeletion(name="dave", mechanism=SHA256)]
        )
    )
    assert deleted.results[0].error_code == 0 and control.metadata.credentials.get("dave") is None


# ----------------------------------------------------------------------------------------- the shell


@asynccontextmanager
async def controller(directory: Path, **settings: Any) -> AsyncIterator[KafkaController]:
    config = ControllerConfig.from_dict(
        {
            "listeners": "127.0.0.1:0",
            "metadata.log.dir": str(directory),
            "broker.session.timeout.ms": 800,
            "controller.retry.backoff.ms": 20,
            **settings,
        }
    )
    c = KafkaController(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(c.run)
        yield c
        c.stop()


AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def acl_creation_body(**kw: Any) -> dict[str, Any]:
    return to_body(sm.CreateAclsRequest(creations=[creation(**kw)]))


async def test_controller_serves_acls_and_users_and_sends_them_to_brokers(tmp_path: Path) -> None:
    async with controller(
        tmp_path, **{"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"}
    ) as c:
        port = c.bound_port
        assert port is not None
        async with fake_broker(1) as b1, managed(b1, port) as (life, _):
            with trio.fail_after(5):
                await life.unfenced.wait()
            created = from_body(
                sm.CreateAclsResponse, await call(port, ApiKeys.CREATE_ACLS, acl_creation_body())
            )
            assert created.results[0].error_code == 0
            altered = await call(
                port,
                ApiKeys.ALTER_USER_SCRAM_CREDENTIALS,
                to_body(sm.AlterUserScramCredentialsRequest(upsertions=[upsertion("alice", "alice-secret")])),
            )
            assert altered["results"][0]["error_code"] == 0

            def latest_security() -> Any:
                copies = [b["security"] for b in b1.got(ApiKeys.UPDATE_METADATA) if b.get("security")]
                return copies[-1] if copies and copies[-1]["version"] == 2 else None

            copy = from_body(
                sm.UpdateMetadataSecurity, await wait_for(latest_security, "the ACLs and user at broker 1", 5)
            )
            assert [(a.principal, a.operation) for a in copy.acls] == [("User:alice", WRITE)]
            assert [c.name for c in copy.scram_credentials] == ["alice"]
            described = from_body(
                sm.DescribeAclsResponse, await call(port, ApiKeys.DESCRIBE_ACLS, to_body(describe_all()))
            )
            assert described.error_code == 0 and len(described.resources) == 1
            # The controller's own SASL store has the user too.
            cred = c.credential_store.get("alice")
            assert cred is not None and cred.matches_password("alice-secret")
    security_dir = tmp_path / "security"
    for name in ("acls.json", "credentials.json"):
        assert stat.S_IMODE((security_dir / name).stat().st_mode) == 0o600
    # A restarted controller has them all, and the authorizer on (ANONYMOUS is no longer a super user).
    async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as c2:
        port = c2.bound_port
        assert port is not None
        assert c2.auth.authorizer is not None and len(c2.auth.authorizer.acls()) == 1
        cred = c2.credential_store.get("alice")
        assert cred is not None and cred.matches_password("alice-secret")
        for api, body in (
            (ApiKeys.CREATE_ACLS, acl_creation_body()),
            (ApiKeys.DESCRIBE_ACLS, to_body(describe_all())),
            (ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None}),
            (ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": [{"name": "alice", "mechanism": 1}]}),
            (
                ApiKeys.BROKER_REGISTRATION,
                {"broker_id": 7, "cluster_id": "isrsim", "incarnation_id": "x", "listeners": []},
            ),
            (ApiKeys.BROKER_HEARTBEAT, {"broker_id": 7, "broker_epoch": 1}),
        ):
            answer = await call(port, api, body)
            assert answer["error_code"] == Errors.CLUSTER_AUTHORIZATION_FAILED, api
        topics = await call(
            port,
            ApiKeys.CREATE_TOPICS,
            {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 100},
        )
        assert topics["topics"][0]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
        deleted = await call(port, ApiKeys.DELETE_TOPICS, {"topic_names": ["x"], "timeout_ms": 100})
        assert deleted["responses"][0]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
        cluster = await call(port, ApiKeys.DESCRIBE_CLUSTER, {})
        assert cluster["error_code"] == 0  # open, as in Kafka
        assert c2.credential_store.get("alice") is not None


async def test_acl_apis_without_an_authorizer_are_security_disabled(tmp_path: Path) -> None:
    async with controller(tmp_path) as c:
        assert c.bound_port is not None
        answer = await call(c.bound_port, ApiKeys.CREATE_ACLS, acl_creation_body())
        assert answer["error_code"] == Errors.SECURITY_DISABLED == 54
        users = await call(c.bound_port, ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
        assert users["error_code"] == 0 and users["results"] == []


async def test_controller_topic_apis_decide_per_topic(tmp_path: Path) -> None:
    """CREATE_TOPICS needs Create on the cluster or the topic, DELETE_TOPICS Delete, DESCRIBE_CONFIGS
    DescribeConfigs, METADATA Describe (all topics: only those listed), each per topic."""

    def allow(op: AclOperation, name: str, pattern: PatternType = PatternType.LITERAL) -> AclBinding:
        return AclBinding(
            ResourcePattern(ResourceType.TOPIC, name, pattern),
            AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW),
        )

    async with controller(tmp_path, **{"authorizer.class.name": AUTHORIZER}) as c:
        port = c.bound_port
        assert port is not None and c.auth.authorizer is not None
        c.auth.authorizer.replace_acls(
            [
                allow(AclOperation.CREATE, "mine-", PatternType.PREFIXED),
                allow(AclOperation.ALTER_CONFIGS, "mine-a"),
            ]
        )

        def topic(name: str) -> dict[str, Any]:
            return {"name": name, "num_partitions": 1, "replication_factor": 1}

        created = await call(
            port, ApiKeys.CREATE_TOPICS, {"topics": [topic("mine-a"), topic("theirs")], "timeout_ms": 100}
        )
        codes = {t["name"]: t["error_code"] for t in created["topics"]}
        # mine-a: allowed, and refused only for lack of live brokers; theirs: not authorized
        assert codes["theirs"] == Errors.TOPIC_AUTHORIZATION_FAILED
        assert codes["mine-a"] != Errors.TOPIC_AUTHORIZATION_FAILED
        configs = await call(
            port,
            ApiKeys.DESCRIBE_CONFIGS,
            {"resources": [{"resource_type": 2, "resource_name": n} for n in ("mine-a", "theirs")]},
        )
        results = {r["resource_name"]: r["error_code"] for r in configs["results"]}
        assert results["theirs"] == Errors.TOPIC_AUTHORIZATION_FAILED
        assert results["mine-a"] != Errors.TOPIC_AUTHORIZATION_FAILED  # AlterConfigs implies DescribeConfigs
        deleted = await call(port, ApiKeys.DELETE_TOPICS, {"topic_names": ["mine-a"], "timeout_ms": 100})
        assert deleted["responses"][0]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
        named = await call(port, ApiKeys.METADATA, {"topics": [{"name": "theirs"}]})
        assert named["topics"][0]["error_code"] == Errors.TOPIC_AUTHORIZATION_FAILED
