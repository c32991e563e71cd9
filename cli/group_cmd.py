"""``isrsim group list | describe G | delete G`` (kafka-consumer-groups --list / --describe / --delete): the
consumer groups the brokers coordinate; for one group its state, coordinator, members, assignment, committed
offsets, log end offsets and lag per partition; deleting Empty groups (docs/groups.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import trio

from cli.client_run import run_client
from cli.main import setup_logging
from cli.output import OUTPUT_OPTION, echo_json
from kit.cluster_client import ClientError, ClusterClient, bootstrap_from
from protocol import (
    CONSUMER_REPLICA_ID,
    LATEST_TIMESTAMP,
    ApiKeys,
    ConnectionClosed,
    Errors,
    decode_assignment,
    error_name,
)

DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    envvar="ISRSIM_DATA_DIR",
    help="Cluster root made by `isrsim cluster up` (default ./isrsim-data, or $ISRSIM_DATA_DIR).",
)
BOOTSTRAP_OPTION = click.option(
    "--bootstrap-server", default=None, help="host:port[,host:port] of brokers (instead of --data-dir)."
)
# Kafka's versions used here (the group APIs are served at Kafka's versions in both encodings).
OFFSET_FETCH_VERSION = 5
DESCRIBE_GROUPS_VERSION = 4
LIST_GROUPS_VERSION = 4
DELETE_GROUPS_VERSION = 2
# kafka-consumer-groups' words for DeleteGroups' errors (the exception each maps to, and its message).
DELETE_ERRORS = {
    Errors.NON_EMPTY_GROUP: "GroupNotEmptyException: The group is not empty.",
    Errors.GROUP_ID_NOT_FOUND: "GroupIdNotFoundException: The group id does not exist.",
    Errors.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationException: Group authorization failed.",
    Errors.INVALID_GROUP_ID: "InvalidGroupIdException: The configured groupId is invalid.",
}
RETRY_ERRORS = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR)


async def _coordinator(client: ClusterClient, group: str, wait_s: float = 10.0) -> int:
    """The broker id of the group's coordinator (FindCoordinator), waiting while it is being found."""
    last = Errors.NONE
    with trio.move_on_after(wait_s):
        while True:
            resp = await client.request_any(ApiKeys.FIND_COORDINATOR, {"key": group})
            last = Errors(resp["error_code"])
            if last == Errors.NONE:
                return int(resp["node_id"])
            if last not in RETRY_ERRORS:
                break
            await trio.sleep(0.2)
    raise ClientError(f"no coordinator for group {group!r}: {last.name} (is __consumer_offsets available?)")


async def _ask_broker(
    client: ClusterClient, broker_id: int, api: ApiKeys, body: dict[str, Any], version: int
) -> dict[str, Any]:
    conn = await client.broker_connection(broker_id)
    return await conn.request(api, body, api_version=version, timeout=10)


async def _log_end_offsets(
    client: ClusterClient, partitions: set[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Each partition's latest offset as consumers see it (the HW), asked of its leader."""
    out: dict[tuple[str, int], int] = {}
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for tp in partitions:
        by_leader.setdefault(client.leader_for(tp), []).append(tp)
    for leader, tps in by_leader.items():
        if leader < 0:
            continue
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, p in tps:
            topics.setdefault(topic, []).append({"partition_index": p, "timestamp": LATEST_TIMESTAMP})
        body = {
            "replica_id": CONSUMER_REPLICA_ID,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        try:
            resp = await _ask_broker(client, leader, ApiKeys.LIST_OFFSETS, body, 0)
        except (OSError, trio.TooSlowError, ConnectionClosed):
            continue
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == Errors.NONE:
                    out[(t["name"], p["partition_index"])] = int(p["offset"])
    return out


async def describe_group(client: ClusterClient, group: str) -> dict[str, Any]:
    """Everything ``group describe`` shows, as one document (its ``-o json``)."""
    await client.refresh_metadata()
    coordinator = await _coordinator(client, group)
    described: dict[str, Any] = {}
    committed: dict[str, Any] = {}
    with trio.fail_after(15):
        while True:
            resp = await _ask_broker(
                client, coordinator, ApiKeys.DESCRIBE_GROUPS, {"groups": [group]}, DESCRIBE_GROUPS_VERSION
            )
            described = resp["groups"][0]
            fetched = await _ask_broker(
                client,
                coordinator,
                ApiKeys.OFFSET_FETCH,
                {"group_id": group, "topics": None},
                OFFSET_FETCH_VERSION,
            )
            errors = {described["error_code"], fetched["error_code"]}
            if errors <= {Errors.NONE}:
                committed = fetched
                break
            if not errors & set(RETRY_ERRORS):
                bad = next(e for e in errors if e != Errors.NONE)
                raise ClientError(f"group {group!r}: {error_name(bad)}")
            await trio.sleep(0.2)
            coordinator = await _coordinator(client, group)
    members: list[dict[str, Any]] = []
    owner: dict[tuple[str, int], dict[str, Any]] = {}
    for m in described["members"]:
        assignment = decode_assignment(bytes(m["member_assignment"])) or {}
        member = {
            "member_id": m["member_id"],
            "client_id": m["client_id"],
            "host": m["client_host"],
            "group_instance_id": m.get("group_instance_id"),
            "assignment": [{"topic": t, "partition": p} for t, ps in sorted(assignment.items()) for p in ps],
        }
        members.append(member)
        for t, ps in assignment.items():
            for p in ps:
                owner[(t, p)] = member
    offsets = {
        (t["name"], p["partition_index"]): int(p["committed_offset"])
        for t in committed["topics"]
        for p in t["partitions"]
        if p["error_code"] == Errors.NONE and p["committed_offset"] >= 0
    }
    partitions = set(offsets) | set(owner)
    ends = await _log_end_offsets(client, partitions)
    rows: list[dict[str, Any]] = []
    for tp in sorted(partitions):
        current = offsets.get(tp)
        end = ends.get(tp)
        member = owner.get(tp)
        rows.append(
            {
                "topic": tp[0],
                "partition": tp[1],
                "committed_offset": current,
                "log_end_offset": end,
                "lag": None if current is None or end is None else max(end - current, 0),
                "member_id": member["member_id"] if member else None,
                "host": member["host"] if member else None,
                "client_id": member["client_id"] if member else None,
            }
        )
    return {
        "group": group,
        "state": described["group_state"],
        "coordinator": coordinator,
        "protocol_type": described["protocol_type"],
        "protocol": described["protocol_data"],
        "members": members,
        "partitions": rows,
        "total_lag": sum(r["lag"] or 0 for r in rows),
    }


async def list_groups(client: ClusterClient) -> list[dict[str, Any]]:
    """Every group of every live broker (each lists the groups it coordinates), by name."""
    await client.refresh_metadata()
    out: list[dict[str, Any]] = []
    for broker_id in sorted(client.brokers):
        try:
            resp = await _ask_broker(client, broker_id, ApiKeys.LIST_GROUPS, {}, LIST_GROUPS_VERSION)
        except (OSError, trio.TooSlowError, ConnectionClosed):
            continue
        for g in resp["groups"]:
            out.append(
                {
                    "group": g["group_id"],
                    "state": g["group_state"],
                    "protocol_type": g["protocol_type"],
                    "coordinator": broker_id,
                }
            )
    return sorted(out, key=lambda g: g["group"])


async def delete_groups(client: ClusterClient, groups: list[str]) -> dict[str, Errors]:
    """DeleteGroups for each group at its coordinator (retried while the coordinator moves or loads)."""
    await client.refresh_metadata()
    out: dict[str, Errors] = {}
    for group_id in dict.fromkeys(groups):
        error = Errors.NONE
        with trio.move_on_after(15):
            while True:
                coordinator = await _coordinator(client, group_id)
                resp = await _ask_broker(
                    client,
                    coordinator,
                    ApiKeys.DELETE_GROUPS,
                    {"groups_names": [group_id]},
                    DELETE_GROUPS_VERSION,
                )
                error = Errors(resp["results"][0]["error_code"])
                if error not in RETRY_ERRORS:
                    break
                await trio.sleep(0.2)
        out[group_id] = error
    return out


def _run(fn: Any, data_dir: Path | None, bootstrap_server: str | None) -> Any:
    async def main() -> Any:
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
        async with trio.open_nursery() as nursery:
            client = ClusterClient(nursery, bootstrap, client_id="isrsim-group")
            try:
                return await fn(client)
            finally:
                await client.aclose()
                nursery.cancel_scope.cancel()

    try:
        return run_client(main)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [headers, *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]


@click.group()
def group() -> None:
    """List, describe and delete consumer groups (kafka-consumer-groups)."""


@group.command("list")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
@OUTPUT_OPTION
def list_cmd(data_dir: Path | None, bootstrap_server: str | None, output: str) -> None:
    """Every consumer group, its state and its coordinator."""
    setup_logging("WARNING", "group")
    groups = _run(list_groups, data_dir, bootstrap_server)
    if output == "json":
        echo_json({"groups": groups})
        return
    if not groups:
        return
    for line in _table(
        ["GROUP", "STATE", "COORDINATOR"], [[g["group"], g["state"], g["coordinator"]] for g in groups]
    ):
        click.echo(line)


# The exit status of `group describe` for a group that does not exist (as a usage error: nothing to show).
GROUP_NOT_FOUND_EXIT = 2


@group.command("describe")
@click.argument("group_id", metavar="GROUP")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
@OUTPUT_OPTION
def describe_cmd(group_id: str, data_dir: Path | None, bootstrap_server: str | None, output: str) -> None:
    """GROUP's state, coordinator, members, and per partition the committed offset, log end offset and lag
    (kafka-consumer-groups --describe)."""
    setup_logging("WARNING", "group")
    doc = _run(lambda client: describe_group(client, group_id), data_dir, bootstrap_server)
    if doc["state"] == "Dead" and not doc["partitions"]:
        # kafka-consumer-groups --describe: an error, not an empty group.
        click.echo(f"Error: Consumer group '{group_id}' does not exist.", err=True)
        sys.exit(GROUP_NOT_FOUND_EXIT)
    if output == "json":
        echo_json(doc)
        return
    click.echo(
        f"Group {doc['group']}: {doc['state']}, coordinator broker {doc['coordinator']}, "
        f"{len(doc['members'])} members, protocol {doc['protocol'] or '-'}, total lag {doc['total_lag']}"
    )
    click.echo("")
    rows = [
        [
            doc["group"],
            r["topic"],
            r["partition"],
            r["committed_offset"],
            r["log_end_offset"],
            r["lag"],
            r["member_id"],
            r["host"],
            r["client_id"],
        ]
        for r in doc["partitions"]
    ]
    headers = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    for line in _table(headers, rows):
        click.echo(line)


@group.command("delete")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
def delete_cmd(group_ids: tuple[str, ...], data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Delete each GROUP with its committed offsets (kafka-consumer-groups --delete). Only a group without
    members (state Empty) can be deleted; exit code 1 if any could not be."""
    setup_logging("WARNING", "group")
    errors = _run(lambda client: delete_groups(client, list(group_ids)), data_dir, bootstrap_server)
    failed = {g: e for g, e in errors.items() if e != Errors.NONE}
    deleted = [g for g in errors if g not in failed]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        click.echo(f"Deletion of requested consumer groups ({names}) was successful.")
    if failed:
        click.echo("Deletion of some consumer groups failed:")
        for g, e in failed.items():
            why = DELETE_ERRORS.get(e, f"{error_name(e)}")
            click.echo(f"* Group '{g}' could not be deleted due to: {why}")
        raise SystemExit(1)
