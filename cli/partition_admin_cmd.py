"""``isrsim leader-election`` (kafka-leader-election) and ``isrsim reassign-partitions``
(kafka-reassign-partitions), answered by the active controller (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.output import OUTPUT_OPTION, echo_json
from cli.topic_cmd import _controller, _options, _request
from protocol import ApiKeys, error_name

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def _partitions(topic: str | None, partitions: tuple[int, ...], every: bool) -> list[dict[str, Any]] | None:
    if every:
        if topic is not None or partitions:
            raise click.UsageError("--all-topic-partitions takes no --topic or --partition")
        return None
    if topic is None:
        raise click.UsageError(
            "name a --topic (with --partition, or all its partitions) or --all-topic-partitions"
        )
    return [{"topic": topic, "partitions": list(partitions)}]


@click.command("leader-election")
@_options
@click.option(
    "--election-type",
    type=click.Choice(sorted(ELECTION_TYPES)),
    required=True,
    help="preferred: the first assigned replica leads again; unclean: a partition without a leader gets one.",
)
@click.option("--topic", default=None, help="The topic.")
@click.option(
    "--partition", "partitions", type=int, multiple=True, help="A partition of --topic (repeatable)."
)
@click.option("--all-topic-partitions", "every", is_flag=True, help="Every partition of every topic.")
@OUTPUT_OPTION
def leader_election(
    data_dir: Path | None,
    bootstrap_server: str | None,
    election_type: str,
    topic: str | None,
    partitions: tuple[int, ...],
    every: bool,
    output: str,
) -> None:
    """Elect leaders through the controller (ElectLeaders, 43)."""
    named = _partitions(topic, partitions, every)
    if named is not None and not partitions:
        # every partition of the topic: as Kafka's tool, named one by one (from the controller's metadata)
        meta = _request(
            _controller(data_dir, bootstrap_server), ApiKeys.METADATA, {"topics": [{"name": topic}]}
        )
        found = [p["partition_index"] for t in meta.get("topics", []) for p in t.get("partitions", [])]
        named = [{"topic": topic, "partitions": sorted(found)}]
    body = {"election_type": ELECTION_TYPES[election_type], "topic_partitions": named, "timeout_ms": 30000}
    resp = _request(_controller(data_dir, bootstrap_server), ApiKeys.ELECT_LEADERS, body, timeout=40.0)
    if output == "json":
        echo_json(resp)
        return
    failed = False
    for result in resp.get("replica_election_results", []):
        for p in result["partition_result"]:
            tp = f"{result['topic']}-{p['partition_id']}"
            if p["error_code"] == 0:
                click.echo(f"Successfully completed leader election ({election_type}) for partition {tp}")
            else:
                failed = failed or p["error_code"] != 84  # ELECTION_NOT_NEEDED is no failure
                why = p.get("error_message") or ""
                click.echo(f"{tp}: {error_name(p['error_code'])}{': ' + why if why else ''}")
    if failed:
        raise SystemExit(1)


@click.command("reassign-partitions")
@_options
@click.option("--topic", default=None, help="The topic.")
@click.option("--partition", type=int, default=None, help="The partition of --topic.")
@click.option(
    "--replicas", default=None, help="The target replicas, broker ids comma-separated (leader first)."
)
@click.option("--cancel", is_flag=True, help="Cancel the partition's ongoing reassignment.")
@click.option("--list", "list_only", is_flag=True, help="List the ongoing reassignments.")
@OUTPUT_OPTION
def reassign_partitions(
    data_dir: Path | None,
    bootstrap_server: str | None,
    topic: str | None,
    partition: int | None,
    replicas: str | None,
    cancel: bool,
    list_only: bool,
    output: str,
) -> None:
    """Move a partition's replicas through the controller (AlterPartitionReassignments, 45), cancel a move,
    or list those ongoing (ListPartitionReassignments, 46)."""
    voters = _controller(data_dir, bootstrap_server)
    if list_only:
        resp = _request(voters, ApiKeys.LIST_PARTITION_REASSIGNMENTS, {"topics": None})
        if output == "json":
            echo_json(resp)
            return
        for t in resp.get("topics", []):
            for p in t["partitions"]:
                click.echo(
                    f"{t['name']}-{p['partition_index']}: replicas {p['replicas']} adding "
                    f"{p['adding_replicas']} removing {p['removing_replicas']}"
                )
        return
    if topic is None or partition is None or (replicas is not None) == cancel:
        raise click.UsageError("give --topic, --partition and either --replicas or --cancel (or --list)")
    target: list[int] | None = None
    if replicas is not None:
        try:
            target = [int(r) for r in replicas.split(",") if r.strip()]
        except ValueError:
            raise click.BadParameter(
                f"{replicas!r}: broker ids, comma-separated", param_hint="--replicas"
            ) from None
    body = {
        "timeout_ms": 30000,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "replicas": target}]}],
    }
    resp = _request(voters, ApiKeys.ALTER_PARTITION_REASSIGNMENTS, body, timeout=40.0)
    if output == "json":
        echo_json(resp)
        return
    for t in resp.get("responses", []):
        for p in t["partitions"]:
            if p["error_code"]:
                why = p.get("error_message") or ""
                name = f"{t['name']}-{p['partition_index']}"
                raise click.ClickException(f"{name}: {error_name(p['error_code'])}: {why}")
    if cancel:
        click.echo(f"Cancelled the reassignment of {topic}-{partition}")
    else:
        click.echo(f"Moving {topic}-{partition} to replicas {target} (`isrsim reassign-partitions --list`)")
