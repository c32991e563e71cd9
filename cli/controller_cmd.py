"""``isrsim controller start``: run the controller in the foreground (registered in ``cli.main``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click
import trio


@click.group()
def controller() -> None:
    """Run the cluster controller (elections, ISR changes, broker fencing, topics)."""


@controller.command("start")
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Properties file with the controller's keys (node.id, listeners, metadata.log.dir, ...).",
)
@click.option("--override", "overrides", multiple=True, help="key=value, applied last (repeatable).")
@click.option("--log-level", default="INFO", show_default=True)
def controller_start(config_file: Path | None, overrides: tuple[str, ...], log_level: str) -> None:
    """Run the controller in the foreground until SIGTERM/SIGINT (then it stops cleanly).

    With controller.quorum.voters (id@host:port,..., this node.id among them; one voter is a quorum of one)
    it is a voter of the controller quorum: its state (brokers, topics, leaders, ISRs, epochs) is in the
    metadata log, metadata.log.dir/__cluster_metadata-0, with its vote in metadata.log.dir/quorum-state;
    it is the active controller while it leads the quorum. Without controller.quorum.voters it runs alone,
    its state in metadata.log.dir/cluster-metadata.json. Its journal is metadata.log.dir/events.jsonl.
    Brokers find it through their own controller.quorum.voters.
    """
    from broker import ConfigError, slow_step_instruments
    from cli.config_check import warn_unknown
    from controller import ControllerConfig, StateError, run_controller

    try:
        config = ControllerConfig.load(config_file, list(overrides))
    except ConfigError as exc:
        raise click.ClickException(f"bad controller configuration: {exc}") from None
    warn_unknown("controller", config.unknown_keys, ControllerConfig.KEYS)
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s [controller {config.node_id}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        trio.run(run_controller, config, instruments=slow_step_instruments())
    except StateError as exc:
        raise click.ClickException(str(exc)) from None
    except ConfigError as exc:  # TLS / SASL settings are checked as the controller is built
        raise click.ClickException(f"bad controller configuration: {exc}") from None
    except OSError as exc:
        host, port = config.listener
        raise click.ClickException(
            f"controller {config.node_id} cannot start on {host}:{port} with metadata.log.dir "
            f"{config.directory}: {exc.strerror or exc}; is another process using the port? "
            "(change `listeners`)"
        ) from None


if __name__ == "__main__":
    controller()
