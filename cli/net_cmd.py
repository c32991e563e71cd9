"""``isrsim net partition|isolate|delay|loss|heal|status``: network faults on a running cluster.

A fault is applied by sending each node concerned its whole new rule table (NET_FAULTS, api key 1001): the
cluster-wide view is the union of what the nodes answer, the command edits it (``protocol.faults.FaultSet``)
and every node whose share changed gets its new share. Everything is checked before anything is applied
(names, values, every node concerned up and answering); if one node then fails to take its rules, the
nodes already changed get their old tables back. Every change is appended to ``<root>/faults.jsonl``.

``clients`` names every client of a node (producers, consumers, the CLI: whatever is not a node), as B of
``partition``, ``delay`` and ``loss`` (or A, for the clients -> node direction). ``net loss 1 clients
--percent 30 --one-way`` loses 30 % of broker 1's responses to clients: the broker drops the response frame
after the request took effect (docs/faults.md), what makes a retrying producer write twice unless it is
idempotent. Without ``--one-way`` the clients' requests are lost too (those never take effect).

The library under the commands (``find_cluster``, ``read_tables``, ``change_faults``) is
:mod:`kit.net_faults`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import trio

from cli.output import OUTPUT_OPTION, echo_json
from kit.fault_journal import append_fault
from kit.net_faults import (
    Change,
    NetCluster,
    NetError,
    change_faults,
    endpoint,
    find_cluster,
    normalize_node,
    read_tables,
)
from protocol import (
    CLIENT,
    CLIENTS,
    FaultAction,
    FaultSet,
    LinkFault,
)

# ---------------------------------------------------------------------------------------------- commands

DATA_DIR = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="ISRSIM_DATA_DIR",
    help="Cluster root (default ./isrsim-data, or $ISRSIM_DATA_DIR): cluster.json names the nodes; "
    "faults.jsonl is written there.",
)
BOOTSTRAP = click.option(
    "--bootstrap-server",
    default=None,
    help="host:port of any node (instead of --data-dir); it names its peers.",
)
SEED = click.option("--seed", type=int, default=None, help="Seed for the nodes' loss and jitter draws.")


def _run(
    data_dir: Path | None,
    bootstrap_server: str | None,
    action: str,
    nodes: list[str],
    params: dict[str, Any],
    edit: Callable[[NetCluster, FaultSet], FaultSet],
    required: list[str],
    seed: int | None,
    no_change: str | None = None,
) -> tuple[NetCluster, Change]:
    try:
        cluster = find_cluster(data_dir, bootstrap_server)
        names = [CLIENTS if normalize_node(n) == CLIENTS else cluster.node(n).name for n in nodes]
        change = trio.run(
            lambda: change_faults(cluster, lambda s: edit(cluster, s), required=required, seed=seed)
        )
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    if no_change is not None and change.after == change.before:
        # Nothing to do is not a failure (heal is a cleanup step): said, exit 0, nothing recorded.
        click.echo(no_change)
        return cluster, change
    if seed is not None:
        params = {**params, "seed": seed}
    if cluster.root is not None:
        append_fault(cluster.root, action, names, params)
    else:
        click.echo(
            "not recorded in faults.jsonl: give --data-dir with --bootstrap-server to record it", err=True
        )
    if change.skipped:
        click.echo(f"not set on {', '.join(change.skipped)} (down: a node starts healed)", err=True)
    return cluster, change


def _processes(*names: str) -> list[str]:
    """The names that are processes (which must be up to take rules), without ``clients``."""
    return [n for n in names if normalize_node(n) != CLIENTS]


def _check_pair(a: str, b: str) -> tuple[str, str]:
    a, b = normalize_node(a), normalize_node(b)
    if a == b:
        raise click.ClickException(f"A and B are the same node ({a})")
    if not _processes(a, b):
        raise click.ClickException("A or B must be a node: faults act in the nodes, not in the clients")
    return a, b


@click.group("net")
def net() -> None:
    """Network faults between the cluster's processes (partition, isolate, delay, loss, heal, status).

    A and B are broker ids, controller ids (1000, 1001, ... : the voters of a controller quorum) or
    "controller" (a cluster with a single controller); B (or A) may be "clients": every client of the
    other node.
    Faults live in the nodes' memory: a restarted node starts
    healed. Every change is appended to <root>/faults.jsonl. See docs/faults.md.
    """


@net.command("partition")
@click.argument("a")
@click.argument("b")
@click.option("--one-way", is_flag=True, help="Drop A -> B only (B -> A still delivered).")
@SEED
@DATA_DIR
@BOOTSTRAP
def net_partition(
    a: str, b: str, one_way: bool, seed: int | None, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """Drop every message between A and B (frames are not delivered; requests time out; no RST)."""
    a, b = _check_pair(a, b)
    _run(
        data_dir,
        bootstrap_server,
        FaultAction.PARTITION,
        [a, b],
        {"one_way": one_way},
        lambda c, s: s.partition(endpoint(c, a), endpoint(c, b), one_way=one_way),
        _processes(a, b),
        seed,
    )
    click.echo(f"partitioned {a} -> {b}" if one_way else f"partitioned {a} <-> {b}")


@net.command("isolate")
@click.argument("a")
@SEED
@DATA_DIR
@BOOTSTRAP
def net_isolate(a: str, seed: int | None, data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Cut A off from every other node and every client, both ways."""
    a = normalize_node(a)
    if a == CLIENTS:
        raise click.ClickException(
            "isolate takes a node: `net partition 1 clients` cuts a node's clients off"
        )
    _run(
        data_dir,
        bootstrap_server,
        FaultAction.ISOLATE,
        [a],
        {},
        lambda c, s: s.isolate(c.node(a).name, c.names),
        [a],
        seed,
    )
    click.echo(f"isolated {a} from every other node and every client")


def _check_ms(name: str, value: int) -> None:
    if value < 0:
        raise click.ClickException(f"{name} must be >= 0 ms (got {value})")


@net.command("delay")
@click.argument("a")
@click.argument("b")
@click.option("--ms", type=int, required=True, help="Delay per message, milliseconds.")
@click.option("--jitter-ms", type=int, default=0, show_default=True, help="Uniform ± jitter, milliseconds.")
@click.option("--one-way", is_flag=True, help="Delay A -> B only.")
@SEED
@DATA_DIR
@BOOTSTRAP
def net_delay(
    a: str,
    b: str,
    ms: int,
    jitter_ms: int,
    one_way: bool,
    seed: int | None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Delay every message between A and B by --ms (± --jitter-ms), keeping each connection's order."""
    a, b = _check_pair(a, b)
    _check_ms("--ms", ms)
    _check_ms("--jitter-ms", jitter_ms)
    _run(
        data_dir,
        bootstrap_server,
        FaultAction.DELAY,
        [a, b],
        {"ms": ms, "jitter_ms": jitter_ms, "one_way": one_way},
        lambda c, s: s.delay(endpoint(c, a), endpoint(c, b), ms, jitter_ms, one_way=one_way),
        _processes(a, b),
        seed,
    )
    arrow = "->" if one_way else "<->"
    click.echo(f"delayed {a} {arrow} {b} by {ms} ms" + (f" ± {jitter_ms} ms" if jitter_ms else ""))


@net.command("loss")
@click.argument("a")
@click.argument("b")
@click.option("--percent", type=float, required=True, help="Chance that a message is lost, 0..100.")
@click.option("--one-way", is_flag=True, help="Lose A -> B messages only.")
@SEED
@DATA_DIR
@BOOTSTRAP
def net_loss(
    a: str,
    b: str,
    percent: float,
    one_way: bool,
    seed: int | None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Lose each message between A and B with probability --percent (a lost request times out).

    With B "clients" and --one-way, A's responses to its clients are lost after their requests took
    effect: `net loss 1 clients --percent 30 --one-way`."""
    a, b = _check_pair(a, b)
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        raise click.ClickException(f"--percent must be within 0..100 (got {percent:g})")
    _run(
        data_dir,
        bootstrap_server,
        FaultAction.LOSS,
        [a, b],
        {"percent": percent, "one_way": one_way},
        lambda c, s: s.loss(endpoint(c, a), endpoint(c, b), percent, one_way=one_way),
        _processes(a, b),
        seed,
    )
    click.echo(f"{percent:g}% loss {a} {'->' if one_way else '<->'} {b}")


@net.command("heal")
@click.argument("nodes", nargs=-1)
@DATA_DIR
@BOOTSTRAP
def net_heal(nodes: tuple[str, ...], data_dir: Path | None, bootstrap_server: str | None) -> None:
    """Remove every fault (no argument), those touching node A (one argument), or those between A and B."""
    if len(nodes) > 2:
        raise click.ClickException("net heal takes no node, one node, or two nodes")
    names = [normalize_node(n) for n in nodes]
    if len(names) == 2:
        _check_pair(*names)
    a = names[0] if names else None
    b = names[1] if len(names) == 2 else None
    where = "" if a is None else f" on {a}" if b is None else f" between {a} and {b}"
    _, change = _run(
        data_dir,
        bootstrap_server,
        FaultAction.HEAL,
        names,
        {},
        lambda c, s: s.heal(None if a is None else endpoint(c, a), None if b is None else endpoint(c, b)),
        [],
        None,
        no_change=f"no network faults in force{where}; nothing to heal",
    )
    if change.after == change.before:
        return
    click.echo(f"healed {len(change.before) - len(change.after)} faulty link(s){where}")


@net.command("status")
@DATA_DIR
@BOOTSTRAP
@OUTPUT_OPTION
def net_status(data_dir: Path | None, bootstrap_server: str | None, output: str) -> None:
    """The network faults in force, as the nodes report them."""
    try:
        cluster = find_cluster(data_dir, bootstrap_server)
    except NetError as exc:
        raise click.ClickException(str(exc)) from None
    tables = trio.run(read_tables, cluster)
    if output == "json":
        echo_json(status_document(cluster, tables))
    else:
        click.echo(format_status(cluster, tables))


def status_document(cluster: NetCluster, tables: dict[str, list[LinkFault] | None]) -> dict[str, Any]:
    """``net status -o json``: the faults in force, and each node's answer (its rule count, or null)."""
    faults = FaultSet.merge(t for t in tables.values() if t is not None)
    return {
        "faults": [dataclasses.asdict(rule) for rule in faults],
        "nodes": {
            name: {
                "state": cluster.nodes[name].state,
                "rules": None if tables.get(name) is None else len(tables[name] or []),
            }
            for name in cluster.names
        },
    }


def format_status(cluster: NetCluster, tables: dict[str, list[LinkFault] | None]) -> str:
    faults = FaultSet.merge(t for t in tables.values() if t is not None)
    lines = ["network faults in force:" if len(faults) else "network faults in force: none"]
    for rule in faults:
        src, dst = (CLIENTS if n == CLIENT else n for n in rule.link)
        lines.append(f"  {src:>10} -> {dst:<10} {rule.describe()}")
    states = []
    for name in cluster.names:
        table = tables.get(name)
        if table is None:
            states.append(
                f"{name}: {'down' if cluster.nodes[name].state in ('stopped', 'paused') else 'no answer'}"
            )
        else:
            states.append(f"{name}: {len(table)} rule(s)")
    lines.append("nodes: " + ", ".join(states))
    return "\n".join(lines)


__all__ = ["format_status", "net"]
