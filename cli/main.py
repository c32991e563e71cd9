"""The ``isrsim`` command line (click).

Every subcommand lives in its own module and is imported only when it runs (``isrsim topic list`` loads
``cli.topic_cmd`` and nothing of the workload, the report or the benchmarks): ``COMMANDS`` names each one's
module and attribute, and its one-line help for ``isrsim --help``.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from cli.client_auth import NOT_CLIENTS, add_client_auth_options
from kit.errors import KitError

# name -> ("module:attribute", short help shown by `isrsim --help` without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "acl": ("cli.acl_cmd:acl", "Add, list and remove ACLs (kafka-acls)."),
    "broker": ("cli.broker_cmd:broker", "Run and control broker processes."),
    "bench": ("cli.bench_cmd:bench", "Measure throughput and latency under scenarios."),
    "chaos": (
        "cli.chaos_cmd:chaos",
        "Workload and seeded nemesis against a running cluster, then converge and report.",
    ),
    "cluster": ("cli.cluster:cluster", "Bring a local cluster up and down, and watch it."),
    "consume": ("cli.workload_cmd:consume", "Read TOPIC and print record values (kafka-console-consumer)."),
    "controller": ("cli.broker_cmd:controller", "Run and control the cluster controller."),
    "demo": ("cli.demo_cmd:demo", "The main job, end to end: cluster, workload, faults, report."),
    "dump-log": (
        "cli.dump_log_cmd:dump_log",
        "Print the batches of a segment or partition (kafka-dump-log).",
    ),
    "fault": (
        "cli.fault_cmd:fault",
        "Protocol-level fault rules: errors, delays, lost answers for chosen requests.",
    ),
    "group": (
        "cli.group_cmd:group",
        "List, describe and delete consumer groups: members, offsets, lag (kafka-consumer-groups).",
    ),
    "health": ("cli.health_cmd:health", "Exit 0 if the node at HOST:PORT answers (healthchecks)."),
    "leader-election": (
        "cli.partition_admin_cmd:leader_election",
        "Elect preferred or unclean leaders through the controller (kafka-leader-election).",
    ),
    "net": ("cli.net_cmd:net", "Inject network faults between nodes (partition, delay, loss, heal)."),
    "produce": (
        "cli.workload_cmd:produce",
        "Produce COUNT numbered records, or stdin's lines, to TOPIC (kafka-console-producer).",
    ),
    "reassign-partitions": (
        "cli.partition_admin_cmd:reassign_partitions",
        "Move a partition's replicas, cancel a move, list moves (kafka-reassign-partitions).",
    ),
    "report": ("cli.report_cmd:report", "Run the PySpark consistency report over a cluster root."),
    "run": (
        "cli.run_cmd:run",
        "Run your own program as the workload under seeded faults, then converge and report.",
    ),
    "scenario": (
        "cli.scenario_cmd:scenario",
        "Replay KIP-101, KIP-279 and other stories under a truncation mode.",
    ),
    "sim": ("cli.sim_cmd:sim", "Deterministic simulation: one seed, one exact history (run, explore)."),
    "security": ("cli.security_cmd:security", "Make TLS certificates and SCRAM users for a cluster."),
    "topic": ("cli.topic_cmd:topic", "Create, list, describe and delete topics (kafka-topics)."),
    "transactions": (
        "cli.transactions_cmd:transactions",
        "List and describe transactions: state, producer id and epoch, partitions (kafka-transactions).",
    ),
    "user": ("cli.user_cmd:user", "Add, list and delete SCRAM users (kafka-configs --entity-type users)."),
}


def setup_logging(level: str, who: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s [{who}] %(name)s: %(message)s",
        stream=sys.stderr,
    )


class LazyGroup(click.Group):
    """A click group whose subcommands are imported when they are run (or their own help is asked)."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in self.lazy:
            return super().get_command(ctx, cmd_name)
        target = self.lazy[cmd_name][0]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:  # an optional part that is not installed (e.g. the report's extra)
            raise click.ClickException(
                f"`isrsim {cmd_name}` is not available in this installation: {exc}"
            ) from None
        command = getattr(module, attr)
        assert isinstance(command, click.Command), target
        if cmd_name not in NOT_CLIENTS:
            # --command-config / --user / --password on every command that talks to a cluster.
            add_client_auth_options(command)
        self.commands[cmd_name] = command
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """The kit's and the lab's errors are the user's to fix (or name a bug in one line): each is shown as
        click shows its own, ``Error: MESSAGE`` and exit code 1."""
        try:
            return super().invoke(ctx)
        except KitError as exc:
            raise click.ClickException(str(exc)) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            else:
                command = self.commands[name]
                rows.append((name, command.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="isrsim")
def cli() -> None:
    """isrsim: a Kafka replication cluster simulator.

    Brokers and a controller talk Kafka's replication protocol (LEADER_AND_ISR, FETCH with incremental
    sessions, OFFSET_FOR_LEADER_EPOCH ...) over TCP; kill and restart them while a workload runs, then ask
    the Spark report whether the replicas converged and whether anything acknowledged was lost.

    Commands that talk to a cluster find it through --data-dir (default ./isrsim-data, or the
    ISRSIM_DATA_DIR environment variable) or --bootstrap-server host:port.
    """


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv)


if __name__ == "__main__":
    cli()
