"""How a client command authenticates (docs/security.md): ``--command-config FILE`` (Kafka's flag), else the
cluster root's ``client.properties`` (written by ``cluster up --secure``), else PLAINTEXT; ``--user NAME
--password P`` authenticate as someone else over the same transport.

Every command that talks to a cluster gets the three options from :func:`add_client_auth_options`, which
``cli.main`` applies to each command as it loads it (server commands such as ``broker start`` excepted).
The choice is made before the command runs and set as the process's
``protocol.security.current_client_security``, which every connection the command opens then uses.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from protocol import ClientSecurity

# Commands that do not act as a client of a running cluster (by their name in their group).
NOT_CLIENTS = {"start", "dump-log", "report", "demo", "scenario", "bench", "down", "up", "security"}
_META_KEY = "isrsim.client_auth"


def _apply(
    data_dir: Path | None, command_config: Path | None, user: str | None, password: str | None
) -> ClientSecurity | None:
    """:func:`kit.client_security.apply_client_security`, its errors as click's."""
    from kit.client_security import CredentialsMismatch, apply_client_security
    from protocol import SecurityConfigError

    try:
        return apply_client_security(data_dir, command_config, user, password)
    except CredentialsMismatch as exc:
        raise click.UsageError(str(exc)) from None
    except SecurityConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_META_KEY, {})[param.name] = value
    return value


def _options() -> list[click.Option]:
    return [
        click.Option(
            ["--command-config"],
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            default=None,
            envvar="ISRSIM_COMMAND_CONFIG",
            expose_value=False,
            callback=_remember,
            help="Client properties (security.protocol, sasl.*, ssl.*), or $ISRSIM_COMMAND_CONFIG; "
            "default: <root>/client.properties.",
        ),
        click.Option(
            ["--user"],
            default=None,
            expose_value=False,
            callback=_remember,
            help="Authenticate as this SASL user (with --password).",
        ),
        click.Option(
            ["--password"],
            default=None,
            expose_value=False,
            callback=_remember,
            help="The --user's password.",
        ),
    ]


def add_client_auth_options(command: click.Command) -> click.Command:
    """Adds --command-config, --user and --password to ``command`` (to each client command of a group),
    applied just before the command runs."""
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if name not in NOT_CLIENTS:
                add_client_auth_options(sub)
        return command
    if any(p.name == "command_config" for p in command.params):
        return command
    options = _options()
    if any("--password" in getattr(p, "opts", ()) for p in command.params):
        # The command's own --password (`user add NAME --password P`): authenticate with --command-config.
        options = [o for o in options if o.name == "command_config"]
    command.params.extend(options)
    original: Callable[[click.Context], Any] = command.invoke

    def invoke(ctx: click.Context) -> Any:
        given = ctx.meta.get(_META_KEY, {})
        data_dir = ctx.params.get("data_dir")
        _apply(
            Path(data_dir) if data_dir is not None else None,
            given.get("command_config"),
            given.get("user"),
            given.get("password"),
        )
        return original(ctx)

    command.invoke = invoke  # type: ignore[method-assign]
    return command


__all__ = ["NOT_CLIENTS", "add_client_auth_options"]
