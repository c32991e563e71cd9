"""``isrsim broker start`` (and, from ``cli.cluster``, ``broker kill|restart|pause|resume``), and the
``controller`` group (``controller start``, and ``kill|restart|pause|resume`` from ``cli.cluster``)."""

from __future__ import annotations

from pathlib import Path

import click
import trio

from cli.cluster import (
    broker_kill,
    broker_pause,
    broker_restart,
    broker_resume,
    controller_kill,
    controller_pause,
    controller_restart,
    controller_resume,
)
from cli.controller_cmd import controller
from cli.main import setup_logging


@click.group()
def broker() -> None:
    """Run and control broker processes."""


@broker.command("start")
@click.option("--id", "broker_id", type=int, default=None, help="broker.id (overrides the file).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="server.properties-style file with Kafka's keys.",
)
@click.option("--override", "overrides", multiple=True, help="key=value, applied last (repeatable).")
@click.option("--log-level", default="INFO", show_default=True)
def broker_start(
    broker_id: int | None, config_file: Path | None, overrides: tuple[str, ...], log_level: str
) -> None:
    """Run a broker in the foreground until SIGTERM/SIGINT (then it stops cleanly).

    With no controller.quorum.voters the broker is unmanaged: it obeys LEADER_AND_ISR, STOP_REPLICA and
    UPDATE_METADATA from any client, and its leaders manage their own ISR. node.id is accepted for
    broker.id (KRaft's name).
    """
    from broker import BrokerConfig, ConfigError, LogDirLoadError, run_broker, slow_step_instruments
    from cli.config_check import warn_unknown

    items = list(overrides)
    if broker_id is not None:
        items.append(f"broker.id={broker_id}")
    try:
        config = BrokerConfig.load(config_file, items)
    except ConfigError as exc:
        raise click.ClickException(f"bad broker configuration: {exc}") from None
    warn_unknown(
        f"broker {config.broker_id}", config.unknown_keys, [*BrokerConfig.KEYS, *BrokerConfig.ALIASES]
    )
    setup_logging(log_level, f"broker {config.broker_id}")
    try:
        try:
            status = trio.run(run_broker, config, instruments=slow_step_instruments())
        except BaseExceptionGroup as group:
            # A listener that cannot bind fails inside the server's task group: raise it alone.
            bind_errors, rest = group.split(OSError)
            if bind_errors is None or rest is not None:
                raise
            raise _first_leaf(bind_errors) from None
    except LogDirLoadError as exc:
        raise click.ClickException(f"broker {config.broker_id} refuses to start: {exc}") from None
    except ConfigError as exc:  # TLS / SASL settings are checked as the server is built
        raise click.ClickException(f"bad broker configuration: {exc}") from None
    except OSError as exc:
        where = ", ".join(f"{e.host}:{e.port}" for e in config.listener_config.listeners)
        raise click.ClickException(
            f"broker {config.broker_id} cannot listen on {where}: {exc.strerror or exc}; "
            "is another process using the port? (change `listeners`)"
        ) from None
    if status:
        # The broker stopped itself after a fatal error (logged and journaled as broker_stopped.reason).
        raise SystemExit(status)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


for _command in (broker_kill, broker_restart, broker_pause, broker_resume):
    broker.add_command(_command)
for _command in (controller_kill, controller_restart, controller_pause, controller_resume):
    controller.add_command(_command)
