"""``isrsim user add|list|delete``: SCRAM-SHA-256 users, as ``kafka-configs --alter --entity-type users
--entity-name NAME --add-config 'SCRAM-SHA-256=[iterations=4096,password=P]'`` (and ``--describe``,
``--delete-config``) manage them, answered by the controller.

As Kafka's admin client does, the command salts and hashes the password itself (PBKDF2-HMAC-SHA-256 with
a random salt) and sends only the salt and the salted password (ALTER_USER_SCRAM_CREDENTIALS); the
controller keeps StoredKey and ServerKey. A new user has no ACLs: it may do nothing until ``isrsim acl
add`` grants it something.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from broker import SCRAM_MECHANISM_TYPES, salted_password
from cli.output import OUTPUT_OPTION, echo_json
from cli.topic_cmd import _controller, _options, _request
from protocol import ApiKeys, Errors, error_name

MECHANISM = "SCRAM-SHA-256"
SALT_BYTES = 32
MECHANISM_NAMES = {v: k for k, v in SCRAM_MECHANISM_TYPES.items()}


def _fail_on_request_error(resp: dict[str, object], what: str) -> None:
    code = resp.get("error_code", 0)
    if isinstance(code, int) and code:
        hint = ""
        if code == Errors.CLUSTER_AUTHORIZATION_FAILED:
            hint = "; users are managed by a super user or a principal with Alter on the cluster"
        raise click.ClickException(f"{what}: {error_name(code)}: {resp.get('error_message') or ''}{hint}")


@click.group()
def user() -> None:
    """Add, list and delete SCRAM-SHA-256 users (kafka-configs --entity-type users)."""


@user.command("add")
@click.argument("name")
@click.option("--password", prompt=True, hide_input=True, help="The user's password (asked if not given).")
@click.option(
    "--iterations",
    type=click.IntRange(4096, 16384),
    default=4096,
    show_default=True,
    help="PBKDF2 iterations.",
)
@_options
def user_add(
    name: str, password: str, iterations: int, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """Add user NAME with SCRAM-SHA-256 credentials for PASSWORD, or replace its credentials."""
    if not name:
        raise click.BadParameter("must not be empty", param_hint="NAME")
    if not password:
        raise click.BadParameter("must not be empty", param_hint="--password")
    salt = os.urandom(SALT_BYTES)
    body = {
        "deletions": [],
        "upsertions": [
            {
                "name": name,
                "mechanism": SCRAM_MECHANISM_TYPES[MECHANISM],
                "iterations": iterations,
                "salt": salt,
                "salted_password": salted_password(password, salt, iterations),
            }
        ],
    }
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, body)
    _fail_on_request_error(resp, f"cannot add user {name}")
    [result] = resp.get("results", [{}])
    if result.get("error_code"):
        raise click.ClickException(
            f"cannot add user {name}: {error_name(result['error_code'])}: {result.get('error_message') or ''}"
        )
    click.echo(
        f"Completed updating config for user {name}: {MECHANISM} (iterations={iterations}); "
        "it has no ACLs yet"
    )


@user.command("delete")
@click.argument("name")
@_options
def user_delete(name: str, data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Delete user NAME's SCRAM-SHA-256 credentials (its ACLs stay until `isrsim acl remove`)."""
    body = {"deletions": [{"name": name, "mechanism": SCRAM_MECHANISM_TYPES[MECHANISM]}], "upsertions": []}
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.ALTER_USER_SCRAM_CREDENTIALS, body)
    _fail_on_request_error(resp, f"cannot delete user {name}")
    [result] = resp.get("results", [{}])
    if result.get("error_code"):
        why = f"{error_name(result['error_code'])}: {result.get('error_message') or ''}"
        raise click.ClickException(f"cannot delete user {name}: {why}")
    click.echo(f"Deleted the {MECHANISM} credentials of user {name}")


@user.command("list")
@OUTPUT_OPTION
@_options
def user_list(output: str, data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Every user and its SCRAM mechanisms and iterations (never a secret)."""
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})
    _fail_on_request_error(resp, "cannot list users")
    users = [
        {
            "user": r["user"],
            "credentials": [
                {
                    "mechanism": MECHANISM_NAMES.get(i["mechanism"], str(i["mechanism"])),
                    "iterations": i["iterations"],
                }
                for i in r.get("credential_infos", [])
            ],
        }
        for r in resp.get("results", [])
    ]
    if output == "json":
        echo_json(users)
        return
    for u in users:
        creds = ",".join(f"{c['mechanism']}=[iterations={c['iterations']}]" for c in u["credentials"])
        click.echo(f"SCRAM credential configs for user-principal '{u['user']}' are {creds}")
