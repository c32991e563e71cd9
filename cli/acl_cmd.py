"""``isrsim acl add|list|remove`` (kafka-acls), answered by the controller, which owns the cluster's ACLs and
sends them to every broker.

Kafka's flags: ``--allow-principal`` / ``--deny-principal`` (``User:NAME``, ``User:*``), ``--allow-host`` /
``--deny-host`` (default ``*``), ``--operation`` (default All), ``--topic`` / ``--group`` / ``--cluster``,
``--resource-pattern-type`` (literal or prefixed to add; any, match, literal or prefixed to list or remove),
``--producer`` / ``--consumer`` (the operations a producer / a consumer needs), ``--principal`` (list).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from broker import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    camel,
    parse_enum,
)
from cli.output import OUTPUT_OPTION, echo_json
from cli.topic_cmd import _controller, _options, _request
from protocol import ApiKeys, Errors, error_name

ANY_OP = int(AclOperation.ANY)
ANY_PERMISSION = int(AclPermissionType.ANY)


def _check(resp: dict[str, Any], what: str) -> None:
    """A whole-request error (not authorized, no authorizer) as one line."""
    code = resp.get("error_code", 0)
    if code:
        hint = ""
        if code == Errors.SECURITY_DISABLED:
            hint = "; start the controller with authorizer.class.name set (docs/security.md)"
        elif code == Errors.CLUSTER_AUTHORIZATION_FAILED:
            hint = "; ACLs are changed by a super user or a principal with Alter on the cluster"
        raise click.ClickException(f"{what}: {error_name(code)}: {resp.get('error_message') or ''}{hint}")


def _resource_options(f: Any) -> Any:
    f = click.option(
        "--resource-pattern-type",
        "pattern_type",
        default=None,
        help="literal (default) or prefixed; to list or remove also any or match.",
    )(f)
    f = click.option("--group", "groups", multiple=True, help="A consumer group (repeatable).")(f)
    f = click.option("--cluster", is_flag=True, help="The cluster resource (kafka-cluster).")(f)
    return click.option("--topic", "topics", multiple=True, help="A topic, or * for all (repeatable).")(f)


def _entry_options(f: Any) -> Any:
    f = click.option(
        "--operation",
        "operations",
        multiple=True,
        help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
        "IdempotentWrite or All (repeatable; default All to add).",
    )(f)
    f = click.option(
        "--deny-host", "deny_hosts", multiple=True, help="Host of the deny principals (default *)."
    )(f)
    f = click.option(
        "--allow-host", "allow_hosts", multiple=True, help="Host of the allow principals (default *)."
    )(f)
    f = click.option(
        "--deny-principal", "deny_principals", multiple=True, help="User:NAME denied (repeatable)."
    )(f)
    return click.option(
        "--allow-principal", "allow_principals", multiple=True, help="User:NAME allowed (repeatable)."
    )(f)


def _pattern_type(value: str | None, default: PatternType, allowed: tuple[PatternType, ...]) -> PatternType:
    if value is None:
        return default
    try:
        pattern = parse_enum(PatternType, value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--resource-pattern-type") from None
    if pattern not in allowed:
        names = ", ".join(p.name.lower() for p in allowed)
        raise click.BadParameter(
            f"{value!r} cannot be used here; one of: {names}", param_hint="--resource-pattern-type"
        )
    return pattern


def _resources(
    topics: tuple[str, ...], cluster: bool, groups: tuple[str, ...], pattern: PatternType
) -> list[ResourcePattern]:
    out = [ResourcePattern(ResourceType.TOPIC, t, pattern) for t in topics]
    out += [ResourcePattern(ResourceType.GROUP, g, pattern) for g in groups]
    if cluster:
        if pattern == PatternType.PREFIXED:
            raise click.BadParameter(
                "the cluster resource is LITERAL only", param_hint="--resource-pattern-type"
            )
        out.append(
            ResourcePattern(
                ResourceType.CLUSTER,
                CLUSTER_NAME,
                PatternType.LITERAL if pattern != PatternType.ANY else pattern,
            )
        )
    for r in out:
        if not r.name:
            raise click.BadParameter("a resource name must not be empty")
    return out


def _operations(values: tuple[str, ...], default: tuple[AclOperation, ...]) -> list[AclOperation]:
    if not values:
        return list(default)
    out: list[AclOperation] = []
    for v in values:
        try:
            op = parse_enum(AclOperation, v)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--operation") from None
        if op in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise click.BadParameter(f"{v!r} is not an operation to grant", param_hint="--operation")
        out.append(op)
    return list(dict.fromkeys(out))


def _principals(values: tuple[str, ...], flag: str) -> list[str]:
    for v in values:
        kind, sep, name = v.partition(":")
        if not sep or not kind or not name:
            raise click.BadParameter(f"{v!r} must be TYPE:NAME, e.g. User:alice or User:*", param_hint=flag)
    return list(dict.fromkeys(values))


def _entries(
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: list[AclOperation],
) -> list[AccessControlEntry]:
    out: list[AccessControlEntry] = []
    for principals, hosts, permission, flag in (
        (allow_principals, allow_hosts, AclPermissionType.ALLOW, "--allow-principal"),
        (deny_principals, deny_hosts, AclPermissionType.DENY, "--deny-principal"),
    ):
        for p in _principals(principals, flag):
            for h in hosts or ("*",):
                for op in operations:
                    out.append(AccessControlEntry(p, h, op, permission))
    return out


def _binding_body(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(b.pattern.resource_type),
        "resource_name": b.pattern.name,
        "resource_pattern_type": int(b.pattern.pattern_type),
        "principal": b.entry.principal,
        "host": b.entry.host,
        "operation": int(b.entry.operation),
        "permission_type": int(b.entry.permission_type),
    }


def _filter_body(
    resource: ResourcePattern | None,
    pattern: PatternType,
    entry: AccessControlEntry | None = None,
    principal: str | None = None,
) -> dict[str, Any]:
    return {
        "resource_type_filter": int(ResourceType.ANY if resource is None else resource.resource_type),
        "resource_name_filter": None if resource is None else resource.name,
        "pattern_type_filter": int(pattern),
        "principal_filter": entry.principal if entry is not None else principal,
        "host_filter": None if entry is None else entry.host,
        "operation": ANY_OP if entry is None else int(entry.operation),
        "permission_type": ANY_PERMISSION if entry is None else int(entry.permission_type),
    }


def _pattern_text(resource_type: int, name: str, pattern_type: int) -> str:
    return str(ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)))


def _entry_text(principal: str, host: str, operation: int, permission: int) -> str:
    return str(AccessControlEntry(principal, host, AclOperation(operation), AclPermissionType(permission)))


@click.group()
def acl() -> None:
    """Add, list and remove ACLs (kafka-acls); the controller holds them and sends them to the brokers."""


@acl.command("add")
@_resource_options
@_entry_options
@click.option(
    "--producer", is_flag=True, help="The operations a producer needs: Write, Describe, Create on the topics."
)
@click.option(
    "--consumer", is_flag=True, help="The operations a consumer needs: Read, Describe on topics and groups."
)
@_options
def acl_add(
    topics: tuple[str, ...],
    cluster: bool,
    groups: tuple[str, ...],
    pattern_type: str | None,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    producer: bool,
    consumer: bool,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Add the ACLs for every principal, host and operation given on every resource given."""
    pattern = _pattern_type(pattern_type, PatternType.LITERAL, (PatternType.LITERAL, PatternType.PREFIXED))
    resources = _resources(topics, cluster, groups, pattern)
    if not resources:
        raise click.UsageError("name a resource: --topic T, --group G or --cluster")
    if not allow_principals and not deny_principals:
        raise click.UsageError("name a principal: --allow-principal User:NAME or --deny-principal User:NAME")
    bindings: list[AclBinding] = []
    if producer or consumer:
        if operations:
            raise click.UsageError(
                "--producer / --consumer choose the operations; do not also give --operation"
            )
        wanted: dict[ResourceType, list[AclOperation]] = {}
        if producer:
            wanted.setdefault(ResourceType.TOPIC, []).extend(
                [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE]
            )
        if consumer:
            wanted.setdefault(ResourceType.TOPIC, []).extend([AclOperation.READ, AclOperation.DESCRIBE])
            wanted.setdefault(ResourceType.GROUP, []).extend([AclOperation.READ])
        for r in resources:
            ops = list(dict.fromkeys(wanted.get(r.resource_type, [])))
            for e in _entries(allow_principals, deny_principals, allow_hosts, deny_hosts, ops):
                bindings.append(AclBinding(r, e))
    else:
        ops = _operations(operations, (AclOperation.ALL,))
        for r in resources:
            supported = SUPPORTED_OPERATIONS.get(r.resource_type, frozenset())
            bad = [op for op in ops if op != AclOperation.ALL and op not in supported]
            if bad:
                names = ",".join(sorted(camel(o) for o in supported))
                raise click.BadParameter(
                    f"ResourceType {camel(r.resource_type)} only supports operations {names},All",
                    param_hint="--operation",
                )
            for e in _entries(allow_principals, deny_principals, allow_hosts, deny_hosts, ops):
                bindings.append(AclBinding(r, e))
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.CREATE_ACLS, {"creations": [_binding_body(b) for b in bindings]})
    _check(resp, "cannot add ACLs")
    failed = [(b, r) for b, r in zip(bindings, resp.get("results", []), strict=False) if r.get("error_code")]
    by_resource: dict[ResourcePattern, list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault(b.pattern, []).append(b)
    for r, bs in by_resource.items():
        click.echo(f"Adding ACLs for resource `{r}`:")
        for b in bs:
            click.echo(f" \t{b.entry}")
        click.echo("")
    if failed:
        for b, r in failed:
            click.echo(
                f"Error while adding {b}: {error_name(r['error_code'])}: {r.get('error_message') or ''}",
                err=True,
            )
        raise click.ClickException(f"{len(failed)} of {len(bindings)} ACL(s) not added")


@acl.command("list")
@_resource_options
@click.option(
    "--principal", "principals", multiple=True, help="Only the ACLs of this principal (repeatable)."
)
@OUTPUT_OPTION
@_options
def acl_list(
    topics: tuple[str, ...],
    cluster: bool,
    groups: tuple[str, ...],
    pattern_type: str | None,
    principals: tuple[str, ...],
    output: str,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """The ACLs, grouped by resource (all of them, or those of the resources and principals given)."""
    every = tuple(PatternType(p) for p in (1, 2, 3, 4))
    pattern = _pattern_type(pattern_type, PatternType.ANY, every)
    resources: list[ResourcePattern | None] = list(_resources(topics, cluster, groups, pattern)) or [None]
    principal_filters: list[str | None] = list(_principals(principals, "--principal")) or [None]
    address = _controller(data_dir, bootstrap_server)
    found: dict[tuple[int, str, int], list[tuple[str, str, int, int]]] = {}
    for r in resources:
        for p in principal_filters:
            resp = _request(address, ApiKeys.DESCRIBE_ACLS, _filter_body(r, pattern, principal=p))
            _check(resp, "cannot list ACLs")
            for res in resp.get("resources", []):
                key = (res["resource_type"], res["resource_name"], res["pattern_type"])
                acls = found.setdefault(key, [])
                for a in res.get("acls", []):
                    entry = (a["principal"], a["host"], a["operation"], a["permission_type"])
                    if entry not in acls:
                        acls.append(entry)
    if output == "json":
        echo_json(
            [
                {
                    "resource_type": ResourceType(rt).name,
                    "resource_name": name,
                    "pattern_type": PatternType(pt).name,
                    "acls": [
                        {
                            "principal": p,
                            "host": h,
                            "operation": AclOperation(op).name,
                            "permission_type": AclPermissionType(perm).name,
                        }
                        for p, h, op, perm in acls
                    ],
                }
                for (rt, name, pt), acls in sorted(found.items())
            ]
        )
        return
    for (rt, name, pt), acls in sorted(found.items()):
        click.echo(f"Current ACLs for resource `{_pattern_text(rt, name, pt)}`:")
        for entry in acls:
            click.echo(f" \t{_entry_text(*entry)}")
        click.echo("")


@acl.command("remove")
@_resource_options
@_entry_options
@_options
def acl_remove(
    topics: tuple[str, ...],
    cluster: bool,
    groups: tuple[str, ...],
    pattern_type: str | None,
    allow_principals: tuple[str, ...],
    deny_principals: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    deny_hosts: tuple[str, ...],
    operations: tuple[str, ...],
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Remove the ACLs given (principal, host, operation) from the resources given; with no principal, every
    ACL of those resources (kafka-acls --remove --force)."""
    every = tuple(PatternType(p) for p in (1, 2, 3, 4))
    pattern = _pattern_type(pattern_type, PatternType.LITERAL, every)
    resources = _resources(topics, cluster, groups, pattern)
    if not resources:
        raise click.UsageError("name a resource: --topic T, --group G or --cluster")
    entries: list[AccessControlEntry | None]
    if allow_principals or deny_principals:
        # no --operation: every operation of those principals (the filter's ANY)
        ops = _operations(operations, (AclOperation.ANY,))
        entries = list(_entries(allow_principals, deny_principals, allow_hosts, deny_hosts, ops))
    else:
        if operations:
            raise click.UsageError("--operation needs --allow-principal or --deny-principal")
        entries = [None]
    filters = [_filter_body(r, pattern, e) for r in resources for e in entries]
    address = _controller(data_dir, bootstrap_server)
    resp = _request(address, ApiKeys.DELETE_ACLS, {"filters": filters})
    _check(resp, "cannot remove ACLs")
    removed = 0
    for result in resp.get("filter_results", []):
        if result.get("error_code"):
            raise click.ClickException(
                f"cannot remove ACLs: {error_name(result['error_code'])}: {result.get('error_message') or ''}"
            )
        for a in result.get("matching_acls", []):
            removed += 1
            entry = _entry_text(a["principal"], a["host"], a["operation"], a["permission_type"])
            pattern_text = _pattern_text(a["resource_type"], a["resource_name"], a["pattern_type"])
            click.echo(f"Removed {entry} from `{pattern_text}`")
    if not removed:
        click.echo("No ACL matched; nothing removed.")
