"""``isrsim fault add|observe|list|remove|wait``: protocol-level fault rules on a running cluster (SPEC §16).

A rule answers chosen requests with a chosen error, a delay, no answer, or a closed connection, in the
connection layer of every node (or of ``--node N``), beside the network faults of ``isrsim net``. The
library under the commands is :mod:`kit.protocol_faults`; docs/faults.md has the recipes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import trio

from cli.net_cmd import BOOTSTRAP, DATA_DIR
from cli.output import OUTPUT_OPTION, echo_json
from kit.net_faults import NetCluster, NetError, find_cluster
from kit.protocol_faults import (
    RuleInputError,
    RuleStatus,
    add_rules,
    list_rules,
    remove_rules,
    topic_exists,
    wait_for_hits,
)
from protocol import ProtocolFaultRule, RuleError, parse_api, parse_error

F = TypeVar("F", bound=Callable[..., Any])


class BadRule(click.ClickException):
    """A rule that cannot be: one line, exit 2 (as click's own usage errors)."""

    exit_code = 2


def _cluster(data_dir: Path | None, bootstrap_server: str | None) -> NetCluster:
    try:
        return find_cluster(data_dir, bootstrap_server)
    except NetError as exc:
        raise click.ClickException(str(exc)) from None


def request_filters(command: F) -> F:
    """The options that choose which requests a rule matches, shared by ``add`` and ``observe``."""
    options = [
        click.option(
            "--api", "api", required=True, help="Kafka's API name: Produce, Fetch, Metadata, JoinGroup ..."
        ),
        click.option("--topic", default=None, help="Only requests that touch this topic."),
        click.option("--partition", type=int, default=None, help="Only requests that touch this partition."),
        click.option("--group", default=None, help="Only requests of this consumer group."),
        click.option("--transactional-id", default=None, help="Only requests of this transactional id."),
        click.option("--client-id", default=None, help="Only requests with this client.id."),
        click.option(
            "--node", default=None, help="Only on this node (a broker id, or controller); default every node."
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group("fault")
def fault() -> None:
    """Protocol-level fault rules: answer chosen requests with an error, a delay, no answer or a closed
    connection (add, list, remove, wait).

    Rules live in the nodes' memory (a restarted node starts without them); every rule added or removed
    and every hit is appended to <root>/faults.jsonl. See docs/faults.md, "Protocol-level faults".
    """


@fault.command("add")
@request_filters
@click.option(
    "--error", default=None, help="Answer with this error: Kafka's name or code (NOT_LEADER_OR_FOLLOWER, 6)."
)
@click.option("--delay-ms", type=int, default=None, help="Delay the request (before) or its answer (after).")
@click.option("--drop-response", is_flag=True, help="Send no answer (the client times out).")
@click.option("--disconnect", is_flag=True, help="Close the client's connection.")
@click.option(
    "--when",
    type=click.Choice(["before", "after"]),
    default="before",
    show_default=True,
    help="before: the request is not acted on; after: it takes effect, then the client is told otherwise.",
)
@click.option("--count", type=int, default=None, help="Fire at most N times (on each node holding the rule).")
@click.option(
    "--probability", type=float, default=None, help="Fire on each matching request with chance P (0..1]."
)
@click.option("--seed", type=int, default=None, help="Seed for --probability's draws.")
@DATA_DIR
@BOOTSTRAP
def fault_add(
    api: str,
    topic: str | None,
    partition: int | None,
    group: str | None,
    transactional_id: str | None,
    client_id: str | None,
    node: str | None,
    error: str | None,
    delay_ms: int | None,
    drop_response: bool,
    disconnect: bool,
    when: str,
    count: int | None,
    probability: float | None,
    seed: int | None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Add a rule; prints its id. Exactly one of --error, --delay-ms, --drop-response, --disconnect.

    The first rule added wins when several match a request. A rule with --topic/--partition acts on a
    whole request that touches the partition (a PRODUCE for several partitions included)."""
    _add_rule(
        api=api,
        topic=topic,
        partition=partition,
        group=group,
        transactional_id=transactional_id,
        client_id=client_id,
        node=node,
        error=error,
        delay_ms=delay_ms,
        drop_response=drop_response,
        disconnect=disconnect,
        when=when,
        count=count,
        probability=probability,
        seed=seed,
        data_dir=data_dir,
        bootstrap_server=bootstrap_server,
    )


@fault.command("observe")
@request_filters
@click.option("--count", type=int, default=None, help="Count at most N matches (on each node).")
@DATA_DIR
@BOOTSTRAP
def fault_observe(
    api: str,
    topic: str | None,
    partition: int | None,
    group: str | None,
    transactional_id: str | None,
    client_id: str | None,
    node: str | None,
    count: int | None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Count the requests a rule would match, without acting on them; prints its id.

    Each match is a hit (journaled in faults.jsonl as rule_hit, effect observe): `fault list` shows the
    counts and `fault wait ID --hits N` waits for them, e.g. until a client's third JoinGroup arrived."""
    _add_rule(
        api=api,
        topic=topic,
        partition=partition,
        group=group,
        transactional_id=transactional_id,
        client_id=client_id,
        node=node,
        observe=True,
        count=count,
        data_dir=data_dir,
        bootstrap_server=bootstrap_server,
    )


def _add_rule(
    *,
    api: str,
    topic: str | None,
    partition: int | None,
    group: str | None,
    transactional_id: str | None,
    client_id: str | None,
    node: str | None,
    error: str | None = None,
    delay_ms: int | None = None,
    drop_response: bool = False,
    disconnect: bool = False,
    observe: bool = False,
    when: str = "before",
    count: int | None = None,
    probability: float | None = None,
    seed: int | None = None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Builds the rule (a bad one: one line, exit 2), adds it on every node (or ``node``), prints its id."""
    try:
        if probability is not None and not math.isfinite(probability):
            raise RuleError(f"--probability must be within (0, 1] (got {probability})")
        if delay_ms is not None and delay_ms <= 0:
            raise RuleError(f"--delay-ms must be > 0 (got {delay_ms})")
        rule = ProtocolFaultRule(
            id=1,
            api=parse_api(api),
            topic=topic,
            partition=partition,
            group=group,
            transactional_id=transactional_id,
            client_id=client_id,
            node=node,
            error=None if error is None else parse_error(error),
            delay_ms=delay_ms or 0,
            drop_response=drop_response,
            disconnect=disconnect,
            observe=observe,
            when=when,
            count=count,
            probability=probability,
            seed=seed,
        )
    except RuleError as exc:
        raise BadRule(str(exc)) from None
    cluster = _cluster(data_dir, bootstrap_server)
    # Asked before the rule is in force, so the question is not itself subject to the rule.
    missing_topic = topic is not None and topic_exists(cluster, topic) is False
    try:
        ((added, nodes),) = trio.run(add_rules, cluster, [rule])
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    if missing_topic:
        click.echo(f"note: topic {topic!r} does not exist: rule {added.id} hits once it does", err=True)
    if cluster.root is None:
        click.echo(
            "not recorded in faults.jsonl: give --data-dir with --bootstrap-server to record it", err=True
        )
    click.echo(added.id)
    click.echo(f"rule {added.id} on node(s) {', '.join(nodes)}: {added.describe()}", err=True)


def _status_line(status: RuleStatus) -> str:
    per_node = ", ".join(f"{n}: {h}" for n, h in sorted(status.hits_by_node.items()))
    return f"{status.rule.id:>4}  {status.hits:>6}  {status.rule.describe()}  [nodes {per_node}]"


@fault.command("list")
@DATA_DIR
@BOOTSTRAP
@OUTPUT_OPTION
def fault_list(data_dir: Path | None, bootstrap_server: str | None, output: str) -> None:
    """The rules in force and how often each fired (the sum over the nodes, and per node)."""
    cluster = _cluster(data_dir, bootstrap_server)
    try:
        rules, answers = trio.run(list_rules, cluster)
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    if output == "json":
        echo_json(
            {
                "rules": [s.as_json() for s in rules],
                "nodes": {n: None if a is None else len(a.rules) for n, a in answers.items()},
            }
        )
        return
    if not rules:
        click.echo("protocol fault rules in force: none")
    else:
        click.echo("  id    hits  rule")
        for status in rules:
            click.echo(_status_line(status))
    silent = [n for n, a in answers.items() if a is None]
    if silent:
        click.echo(f"not answering (down?): {', '.join(silent)}", err=True)


@fault.command("remove")
@click.argument("rule_id", type=int, required=False)
@click.option("--all", "remove_all", is_flag=True, help="Remove every rule.")
@DATA_DIR
@BOOTSTRAP
def fault_remove(
    rule_id: int | None, remove_all: bool, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """Remove rule ID, or every rule with --all."""
    if (rule_id is None) == (not remove_all):
        raise BadRule("give a rule id or --all")
    cluster = _cluster(data_dir, bootstrap_server)
    try:
        gone = trio.run(remove_rules, cluster, None if remove_all else [rule_id])
    except RuleInputError as exc:
        raise BadRule(str(exc)) from None
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    if not gone:
        click.echo("no protocol fault rules in force; nothing to remove")
    for status in gone:
        click.echo(f"removed rule {status.rule.id} (fired {status.hits} time(s)): {status.rule.describe()}")


@fault.command("wait")
@click.argument("rule_id", type=int)
@click.option("--hits", type=int, required=True, help="Return when the rule fired this often in all.")
@click.option(
    "--timeout", type=float, default=60.0, show_default=True, help="Seconds before giving up (exit 1)."
)
@DATA_DIR
@BOOTSTRAP
def fault_wait(
    rule_id: int, hits: int, timeout: float, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """Wait until rule ID fired --hits times (exit 0), or --timeout passed (exit 1)."""
    if hits < 1:
        raise BadRule(f"--hits must be >= 1 (got {hits})")
    cluster = _cluster(data_dir, bootstrap_server)
    try:
        seen = trio.run(wait_for_hits, cluster, rule_id, hits, timeout)
    except RuleInputError as exc:
        raise BadRule(str(exc)) from None
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"rule {rule_id} fired {seen} time(s)")


__all__ = ["fault"]
