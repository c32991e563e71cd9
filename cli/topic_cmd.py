"""``isrsim topic create|describe|delete`` (kafka-topics), answered by the active controller: reached
through any voter, or through any broker (which forwards CREATE_TOPICS, DELETE_TOPICS and DESCRIBE_CONFIGS
to it and answers METADATA from its cache)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
import trio

from cli.output import OUTPUT_OPTION, echo_json
from kit.cluster_client import ClientError, parse_address
from kit.cluster_files import ClusterError, ClusterInfo
from kit.controller_quorum import NoActiveController, Voter, all_down, ask_controller, voters_of
from protocol import ApiKeys, Errors, error_name


def _controller(data_dir: Path | None, bootstrap_server: str | None) -> list[Voter]:
    """Where to ask: ``--bootstrap-server`` (one or more host:port of brokers or controllers,
    comma-separated), else every controller of the cluster at ``--data-dir``; requests reach the active
    controller through any of them."""
    if bootstrap_server:
        try:
            addresses = [parse_address(a) for a in bootstrap_server.split(",") if a.strip()]
        except ClientError as exc:
            raise click.BadParameter(str(exc)) from None
        if not addresses:
            raise click.BadParameter("--bootstrap-server: no host:port given")
        return [Voter(None, host, port) for host, port in addresses]
    try:
        info = ClusterInfo.load(data_dir or Path("isrsim-data"))
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    return voters_of(info)


def _request(
    voters: list[Voter], api: ApiKeys, body: dict[str, Any], timeout: float = 10.0
) -> dict[str, Any]:
    """``api`` answered by the active controller (found through any voter, waiting a bounded time while a
    quorum elects one)."""
    try:
        resp, voter = trio.run(ask_controller, voters, api, body, timeout)
    except NoActiveController as exc:
        text = str(exc)
        hint = "" if "is the cluster up?" in text else "; is the cluster up? (`isrsim cluster status`)"
        raise click.ClickException(f"{text}{hint}") from None
    where = voter.address
    if resp is None:
        down = trio.run(all_down, [voter])
        if down is not None:
            raise click.ClickException(down)
        raise click.ClickException(
            f"{where} accepted the connection but did not answer {api.name} within {timeout:.0f}s "
            "(a paused or overloaded node?); `isrsim cluster status` shows the nodes"
        )
    if resp.get("error_code") == Errors.UNSUPPORTED_VERSION:
        raise click.ClickException(
            f"{where} does not serve {api.name}; "
            "pass a broker's or the controllers' addresses (controller.quorum.voters) or use --data-dir"
        )
    if resp.get("error_code") == Errors.NOT_CONTROLLER:
        raise click.ClickException(
            f"{where} is not the active controller ({resp.get('error_message') or 'NOT_CONTROLLER'}); "
            "pass every controller's address to --bootstrap-server (comma-separated) or use --data-dir"
        )
    return resp


def _options(f: Any) -> Any:
    f = click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="ISRSIM_DATA_DIR",
        help="Cluster root (default ./isrsim-data, or $ISRSIM_DATA_DIR).",
    )(f)
    return click.option(
        "--bootstrap-server",
        default=None,
        help="Brokers' or controllers' host:port, comma-separated (any one will do: requests reach the "
        "active controller through it).",
    )(f)


def _topic_option(f: Any) -> Any:
    """``--topic NAME`` (kafka-topics' spelling) as well as the NAME argument."""
    return click.option(
        "--topic", "topic_option", default=None, help="The topic (as kafka-topics' --topic)."
    )(f)


def _one_name(name: str | None, topic_option: str | None, required: bool = True) -> str | None:
    if name is not None and topic_option is not None and name != topic_option:
        raise click.UsageError(f"two topics given: {name} and --topic {topic_option}")
    chosen = name if name is not None else topic_option
    if chosen is None and required:
        raise click.UsageError("name the topic: NAME or --topic NAME")
    return chosen


@click.group()
def topic() -> None:
    """Create, list, describe and delete topics (kafka-topics)."""


CONFIG_RESOURCE_TOPIC = 2
CONFIG_SOURCE_TOPIC = 1
# Shown on the Configs line whatever their source; any other config only when the topic sets it.
ALWAYS_SHOWN_CONFIGS = ("min.insync.replicas", "unclean.leader.election.enable")

# Kafka's internal topics (Topic.isInternal), which --exclude-internal leaves out.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _exclude_internal_option(f: Any) -> Any:
    return click.option(
        "--exclude-internal",
        is_flag=True,
        help="Leave out internal topics (__consumer_offsets ...), as kafka-topics --exclude-internal.",
    )(f)


@topic.command("list")
@_exclude_internal_option
@OUTPUT_OPTION
@_options
def topic_list(
    exclude_internal: bool, output: str, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """The topics' names, one per line (kafka-topics --list); internal ones too unless --exclude-internal."""
    address = _controller(data_dir, bootstrap_server)
    meta = _request(address, ApiKeys.METADATA, {"topics": None})
    names = sorted(
        t["name"]
        for t in meta.get("topics", [])
        if t["error_code"] == 0 and not (exclude_internal and t["name"] in INTERNAL_TOPICS)
    )
    if output == "json":
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


def _topic_configs(address: list[Voter], names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each topic's configs as the controller holds them: name -> {value, default}."""
    if not names:
        return {}
    body = {
        "resources": [{"resource_type": CONFIG_RESOURCE_TOPIC, "resource_name": n} for n in names],
    }
    resp = _request(address, ApiKeys.DESCRIBE_CONFIGS, body)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in resp.get("results", []):
        if r.get("error_code", 0) != 0:
            continue
        # "default": not the topic's own value (Kafka's default or the controller's setting)
        out[r["resource_name"]] = {
            c["name"]: {
                "value": c.get("value"),
                "default": c.get("config_source", CONFIG_SOURCE_TOPIC) != CONFIG_SOURCE_TOPIC,
            }
            for c in r["configs"]
        }
    return out


def _min_isr(configs: dict[str, dict[str, Any]]) -> int | None:
    """A topic's ``min.insync.replicas`` as DESCRIBE_CONFIGS gave it (its own or the default)."""
    value = configs.get("min.insync.replicas", {}).get("value")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


@topic.command("create")
@click.argument("name", required=False)
@_topic_option
@click.option("--partitions", type=click.IntRange(1, 100000), default=1, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option(
    "--config", "configs", multiple=True, help="key=value topic config (e.g. min.insync.replicas=2)."
)
@_options
def topic_create(
    name: str | None,
    topic_option: str | None,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Create topic NAME; returns when every partition has a leader."""
    name = _one_name(name, topic_option)
    assert name is not None
    address = _controller(data_dir, bootstrap_server)
    cfg = {}
    for c in configs:
        if "=" not in c:
            raise click.BadParameter(f"--config {c!r}: expected key=value")
        k, v = c.split("=", 1)
        cfg[k] = v
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": replication_factor,
                "configs": cfg,
            }
        ],
        "timeout_ms": 30000,
    }
    resp = _request(address, ApiKeys.CREATE_TOPICS, body, timeout=35)
    result = resp["topics"][0]
    if result["error_code"] != 0:
        raise click.ClickException(
            f"cannot create {name}: {error_name(result['error_code'])} {result.get('error_message') or ''}"
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = _request(address, ApiKeys.METADATA, {"topics": [{"name": name}]})
        parts = meta["topics"][0].get("partitions", []) if meta.get("topics") else []
        if len(parts) == partitions and all(p["leader_id"] >= 0 for p in parts):
            break
        time.sleep(0.1)
    click.echo(f"created topic {name} with {partitions} partitions, replication factor {replication_factor}")


@topic.command("describe")
@click.argument("name", required=False)
@_topic_option
@click.option(
    "--under-replicated-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than their replicas.",
)
@click.option("--unavailable-partitions", is_flag=True, help="Only partitions with no live leader.")
@click.option(
    "--under-min-isr-partitions",
    is_flag=True,
    help="Only partitions whose ISR is smaller than the topic's min.insync.replicas (or with no leader).",
)
@click.option(
    "--at-min-isr-partitions",
    is_flag=True,
    help="Only partitions whose ISR size equals the topic's min.insync.replicas.",
)
@_exclude_internal_option
@OUTPUT_OPTION
@_options
def topic_describe(
    name: str | None,
    topic_option: str | None,
    under_replicated_partitions: bool,
    unavailable_partitions: bool,
    under_min_isr_partitions: bool,
    at_min_isr_partitions: bool,
    exclude_internal: bool,
    output: str,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Each topic's configs, then the leader, leader epoch, replicas and ISR of every partition
    (kafka-topics --describe). With --under-replicated-partitions, --unavailable-partitions,
    --under-min-isr-partitions or --at-min-isr-partitions, only the partitions that match one of the
    filters given, and nothing at all when none does (as kafka-topics)."""
    name = _one_name(name, topic_option, required=False)
    filtered = (
        under_replicated_partitions
        or unavailable_partitions
        or under_min_isr_partitions
        or at_min_isr_partitions
    )
    address = _controller(data_dir, bootstrap_server)
    meta = _request(address, ApiKeys.METADATA, {"topics": None if name is None else [{"name": name}]})
    live = {b["node_id"] for b in meta.get("brokers", [])}
    described = []
    for t in sorted(meta.get("topics", []), key=lambda t: t["name"]):
        if t["error_code"] != 0:
            raise click.ClickException(
                f"topic {t['name']}: {error_name(t['error_code'])}; `isrsim topic list` shows the topics"
            )
        if not (exclude_internal and t["name"] in INTERNAL_TOPICS):
            described.append(t)
    configs = _topic_configs(address, [t["name"] for t in described])
    topics: list[dict[str, Any]] = []
    for t in described:
        min_isr = _min_isr(configs.get(t["name"], {}))
        partitions = []
        for p in sorted(t["partitions"], key=lambda p: p["partition_index"]):
            # kafka-topics' tests (TopicCommand.PartitionDescription); a partition shown matches one of the
            # filters given.
            isr = len(p["isr_nodes"])
            no_leader = p["leader_id"] < 0
            matches = (
                (under_replicated_partitions and isr < len(p["replica_nodes"]))
                or (unavailable_partitions and (no_leader or p["leader_id"] not in live))
                or (under_min_isr_partitions and (no_leader or (min_isr is not None and isr < min_isr)))
                or (at_min_isr_partitions and min_isr is not None and isr == min_isr)
            )
            if filtered and not matches:
                continue
            partitions.append(
                {
                    "partition": p["partition_index"],
                    "leader": p["leader_id"],
                    "leader_epoch": p["leader_epoch"],
                    "replicas": list(p["replica_nodes"]),
                    "isr": list(p["isr_nodes"]),
                    "offline": list(p.get("offline_replicas", [])),
                }
            )
        topics.append({"name": t["name"], "partitions": partitions, "configs": configs.get(t["name"], {})})
    if filtered:
        topics = [t for t in topics if t["partitions"]]
    if output == "json":
        echo_json(topics)
        return
    if filtered and not topics:
        return  # kafka-topics prints nothing when no partition matches
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for t in [] if filtered else topics:  # with a filter, kafka-topics prints the partitions alone
        shown = ", ".join(
            f"{k}={v['value']}" + (" (default)" if v["default"] else "")
            for k, v in t["configs"].items()
            if k in ALWAYS_SHOWN_CONFIGS or not v["default"]
        )
        click.echo(f"Topic: {t['name']}\tPartitionCount: {len(t['partitions'])}\tConfigs: {shown or '-'}")
    table = Table()
    for col in ("topic", "partition", "leader", "leader epoch", "replicas", "isr", "offline"):
        table.add_column(col)
    shown_rows = 0
    for t in topics:
        for p in t["partitions"]:
            shown_rows += 1
            table.add_row(
                t["name"],
                str(p["partition"]),
                str(p["leader"]),
                str(p["leader_epoch"]),
                ",".join(map(str, p["replicas"])),
                ",".join(map(str, p["isr"])),
                ",".join(map(str, p["offline"])),
            )
    console.print(table)
    click.echo(f"{shown_rows} partition(s)")


@topic.command("delete")
@click.argument("name", required=False)
@_topic_option
@_options
def topic_delete(
    name: str | None, topic_option: str | None, data_dir: Path | None, bootstrap_server: str | None
) -> None:
    """Delete topic NAME (its replicas are stopped and their logs removed)."""
    name = _one_name(name, topic_option)
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.DELETE_TOPICS, {"topic_names": [name], "timeout_ms": 30000}, timeout=35)
    result = resp["responses"][0]
    if result["error_code"] != 0:
        raise click.ClickException(
            f"cannot delete {name}: {error_name(result['error_code'])} {result.get('error_message') or ''}"
        )
    click.echo(f"deleted topic {name}")
