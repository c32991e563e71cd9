"""`isrsim acl` and `isrsim user`: what is refused before anything is sent (kafka-acls' own checks)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cli.acl_cmd import acl
from cli.user_cmd import user

NO_CLUSTER = ("--bootstrap-server", "127.0.0.1:1")  # never reached: each case fails before it connects


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["add", "--allow-principal", "User:a"], "name a resource"),
        (["add", "--topic", "t"], "name a principal"),
        (["add", "--topic", "t", "--allow-principal", "alice"], "must be TYPE:NAME"),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--operation", "ClusterAction"],
            "ResourceType Topic only supports operations",
        ),
        (["add", "--cluster", "--allow-principal", "User:a", "--operation", "Write"], "ResourceType Cluster"),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--operation", "Fly"],
            "unknown AclOperation",
        ),
        (
            ["add", "--cluster", "--allow-principal", "User:a", "--resource-pattern-type", "prefixed"],
            "LITERAL only",
        ),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "match"],
            "cannot be used here",
        ),
        (
            ["add", "--topic", "t", "--allow-principal", "User:a", "--producer", "--operation", "Read"],
            "--producer",
        ),
        (["remove", "--allow-principal", "User:a"], "name a resource"),
        (["remove", "--topic", "t", "--operation", "Read"], "--operation needs"),
    ],
)
def test_acl_refuses_before_sending(args: list[str], problem: str) -> None:
    result = CliRunner().invoke(acl, [*args, *NO_CLUSTER])
    assert result.exit_code == 2, result.output
    assert problem in result.output


def test_user_add_refuses_too_few_iterations() -> None:
    result = CliRunner().invoke(user, ["add", "alice", "--password", "p", "--iterations", "100", *NO_CLUSTER])
    assert result.exit_code == 2 and "4096" in result.output


def test_acl_list_with_no_controller_says_so() -> None:
    result = CliRunner().invoke(acl, ["list", "--bootstrap-server", "127.0.0.1:1"])
    assert result.exit_code == 1 and "nothing is listening at 127.0.0.1:1" in result.output
