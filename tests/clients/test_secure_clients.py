"""A `cluster up --secure` cluster (SASL_SSL everywhere, the authorizer on) used by real Kafka clients with
nothing but `<root>/client.properties` (docs/security.md, docs/clients.md)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.conftest import bootstrap, kcat
from tests.integration.cluster_support import FAST, Cluster, cluster_up
from tests.integration.harness import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.clients]


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path_factory.mktemp("secure") / "root", 3, FAST, secure=True)


def client_properties(cluster: Cluster) -> dict[str, str]:
    """librdkafka's keys, as `cluster up --secure` writes them."""
    out: dict[str, str] = {}
    for line in (cluster.root / "client.properties").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def test_kcat_with_client_properties(secure_cluster: Cluster) -> None:
    props = secure_cluster.root / "client.properties"
    for broker in secure_cluster.info.brokers:
        out = kcat("-F", str(props), "-b", f"{broker.host}:{broker.port}", "-L")
        assert out.returncode == 0, out.stderr
        assert " 3 brokers:" in out.stdout


def test_confluent_kafka_admin_with_client_properties(secure_cluster: Cluster) -> None:
    client = AdminClient(
        {"bootstrap.servers": bootstrap(secure_cluster), **client_properties(secure_cluster)}
    )
    futures = client.create_topics(
        [NewTopic("secured", num_partitions=2, replication_factor=3)], request_timeout=30
    )
    assert futures["secured"].result(timeout=60) is None
    wait_until(
        lambda: len(getattr(client.list_topics(timeout=10).topics.get("secured"), "partitions", {})) == 2, 30
    )


def test_wrong_password_is_refused(secure_cluster: Cluster, tmp_path: Path) -> None:
    text = (secure_cluster.root / "client.properties").read_text()
    bad = tmp_path / "bad.properties"
    bad.write_text(re.sub(r"sasl\.password=.*", "sasl.password=wrong", text))
    broker = secure_cluster.info.brokers[0]
    out = kcat("-F", str(bad), "-b", f"{broker.host}:{broker.port}", "-L", "-m", "3", timeout=30)
    assert out.returncode != 0
    assert "Authentication failed" in out.stderr


def test_authorized_operations_are_what_the_acls_allow(secure_cluster: Cluster) -> None:
    """Kafka's authorizedOperations with the authorizer on: a user allowed only Read on a topic is told
    Read and Describe (Read implies it), and may not grow it (CreatePartitions needs Alter); the admin
    (a super user) is told every operation."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import NewPartitions

    admin_props = client_properties(secure_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap(secure_cluster), **admin_props})
    assert admin.create_topics([NewTopic("guarded", 1, 3)], request_timeout=30)["guarded"].result(60) is None
    secure_cluster.cli("user", "add", "reader", "--password", "reader-secret")
    secure_cluster.cli(
        "acl", "add", "--topic", "guarded", "--allow-principal", "User:reader", "--operation", "Read"
    )
    reader = AdminClient(
        {
            "bootstrap.servers": bootstrap(secure_cluster),
            **admin_props,
            "sasl.username": "reader",
            "sasl.password": "reader-secret",
        }
    )

    def operations(client: AdminClient) -> list[str]:
        topic = client.describe_topics(TopicCollection(["guarded"]), include_authorized_operations=True)
        return sorted(o.name for o in topic["guarded"].result(timeout=30).authorized_operations)

    wait_until(lambda: operations(reader) == ["DESCRIBE", "READ"], 30)
    assert len(operations(admin)) == 8
    refused = reader.create_partitions([NewPartitions("guarded", 2)], request_timeout=30)
    with pytest.raises(Exception, match=r"TOPIC_AUTHORIZATION_FAILED"):
        refused["guarded"].result(timeout=60)
    grown = admin.create_partitions([NewPartitions("guarded", 2)], request_timeout=30)
    assert grown["guarded"].result(timeout=60) is None


def test_acls_in_kafkas_encoding_from_both_clients(secure_cluster: Cluster) -> None:
    """CreateAcls, DescribeAcls and DeleteAcls (29-31) sent to brokers in Kafka's encoding: confluent-kafka
    creates a binding, kafka-python (SASL_SSL with SCRAM) sees it and deletes it, and the ACL works."""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
    )
    from kafka.admin import ResourcePatternFilter as KpResourcePatternFilter
    from kafka.admin import ResourceType as KpResourceType

    props = client_properties(secure_cluster)
    admin = AdminClient({"bootstrap.servers": bootstrap(secure_cluster), **props})
    binding = AclBinding(
        ResourceType.TOPIC,
        "acl-topic",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([binding], request_timeout=30).values():
        assert future.result(timeout=60) is None
    described = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            "acl-topic",
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=30,
    ).result(timeout=60)
    assert described == [binding]

    kp_admin = KafkaAdminClient(
        bootstrap_servers=bootstrap(secure_cluster),
        security_protocol="SASL_SSL",
        sasl_mechanism=props["sasl.mechanism"],
        sasl_plain_username=props["sasl.username"],
        sasl_plain_password=props["sasl.password"],
        ssl_cafile=props["ssl.ca.location"],
        ssl_check_hostname=False,
        request_timeout_ms=30000,
    )
    try:
        acl_filter = ACLFilter(
            principal="User:alice",
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=KpResourcePatternFilter(
                KpResourceType.TOPIC, "acl-topic", ACLResourcePatternType.LITERAL
            ),
        )
        acls, error = kp_admin.describe_acls(acl_filter)
        assert error.errno == 0
        assert [(a.principal, a.operation) for a in acls] == [("User:alice", ACLOperation.WRITE)]
        deleted = kp_admin.delete_acls([acl_filter])
        [(_, matches, filter_error)] = deleted
        assert filter_error.errno == 0
        assert [(a.principal, a.operation) for a in matches] == [("User:alice", ACLOperation.WRITE)]
        acls, _ = kp_admin.describe_acls(acl_filter)
        assert acls == []
    finally:
        kp_admin.close()
