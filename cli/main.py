"""The ``isrsim`` command line (click)."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import trio

from cli.cluster_client import ClientError, ClusterClient, bootstrap_from
from cli.consumer import ConsumedRecord, Consumer
from cli.producer import ACKS_BY_NAME, AckJournal, Producer, ProducerSettings, ProduceStats

DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Cluster root made by `isrsim cluster up` (default ./isrsim-data); cluster.json names the brokers.",
)
BOOTSTRAP_OPTION = click.option(
    "--bootstrap-server", default=None, help="host:port[,host:port] of brokers (instead of --data-dir)."
)


def setup_logging(level: str, who: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s [{who}] %(name)s: %(message)s",
        stream=sys.stderr,
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="isrsim")
def cli() -> None:
    """isrsim: a Kafka replication cluster simulator.

    Brokers and a controller talk Kafka's replication protocol (LEADER_AND_ISR, FETCH with incremental
    sessions, OFFSET_FOR_LEADER_EPOCH ...) over TCP; kill and restart them while a workload runs, then ask
    the Spark report whether the replicas converged and whether anything acknowledged was lost.
    """


# ---------------------------------------------------------------------------------------------- broker


@cli.group()
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
    UPDATE_METADATA from any client, and its leaders manage their own ISR.
    """
    from broker import BrokerConfig, ConfigError, InconsistentBrokerIdError, run_broker

    items = list(overrides)
    if broker_id is not None:
        items.append(f"broker.id={broker_id}")
    try:
        config = BrokerConfig.load(config_file, items)
    except ConfigError as exc:
        raise click.ClickException(f"bad broker configuration: {exc}") from None
    setup_logging(log_level, f"broker {config.broker_id}")
    try:
        status = trio.run(run_broker, config)
    except InconsistentBrokerIdError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        host, port = config.listener
        raise click.ClickException(
            f"broker {config.broker_id} cannot listen on {host}:{port}: {exc.strerror or exc}; "
            "is another process using the port? (change `listeners`)"
        ) from None
    if status:
        # The broker stopped itself after a fatal error (logged and journaled as broker_stopped.reason).
        raise SystemExit(status)


# ---------------------------------------------------------------------------------------------- produce


def _fmt_rate(stats: ProduceStats) -> str:
    secs = max(stats.elapsed, 1e-9)
    return (
        f"{stats.records_acked:,} records acknowledged in {secs:.2f}s: "
        f"{stats.records_acked / secs:,.0f} records/s, {stats.bytes_acked / secs / 1e6:.2f} MB/s"
    )


@cli.command()
@click.argument("topic")
@click.option("--count", type=int, default=10_000, show_default=True, help="Records to produce.")
@click.option("--acks", type=click.Choice(["all", "-1", "1", "0"]), default="all", show_default=True)
@click.option("--record-size", type=int, default=100, show_default=True, help="Bytes per record value.")
@click.option("--batch-records", type=int, default=200, show_default=True, help="Records per batch.")
@click.option("--rate", type=float, default=None, help="Records per second (default: as fast as possible).")
@click.option(
    "--max-in-flight", type=int, default=5, show_default=True, help="Requests in flight per partition."
)
@click.option("--timeout-ms", type=int, default=30_000, show_default=True, help="PRODUCE timeout_ms.")
@click.option(
    "--acked-journal",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for acked-<producer_id>.jsonl (default: <data-dir>/workload with a cluster root).",
)
@click.option("--progress/--no-progress", default=None, help="Show a progress bar (default: on a terminal).")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
def produce(
    topic: str,
    count: int,
    acks: str,
    record_size: int,
    batch_records: int,
    rate: float | None,
    max_in_flight: int,
    timeout_ms: int,
    acked_journal: Path | None,
    progress: bool | None,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Produce COUNT numbered records to TOPIC and print throughput."""
    setup_logging("WARNING", "produce")
    if count < 0 or record_size < 0 or batch_records < 1 or max_in_flight < 1:
        raise click.BadParameter(
            "--count and --record-size must be >= 0, --batch-records/--max-in-flight >= 1"
        )
    settings = ProducerSettings(
        acks=ACKS_BY_NAME[acks],
        record_size=record_size,
        batch_records=batch_records,
        max_in_flight=max_in_flight,
        request_timeout_ms=timeout_ms,
    )
    journal_dir = acked_journal
    if journal_dir is None and not bootstrap_server:
        journal_dir = (data_dir or Path("isrsim-data")) / "workload"
    show = sys.stderr.isatty() if progress is None else progress

    async def main() -> ProduceStats:
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
        producer_id = f"{int(time.time())}-{os.getpid()}"
        journal = AckJournal(journal_dir, producer_id) if journal_dir is not None else None
        try:
            async with trio.open_nursery() as nursery:
                client = ClusterClient(nursery, bootstrap, client_id=f"producer-{producer_id}")
                stats = await _run_producer(client, topic, settings, journal, producer_id, count, rate, show)
                await client.aclose()
                nursery.cancel_scope.cancel()
            return stats
        finally:
            if journal is not None:
                journal.close()

    try:
        stats = trio.run(main)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(_fmt_rate(stats))
    if stats.latencies_ms:
        lat = sorted(stats.latencies_ms)
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        click.echo(f"latency ms: p50 {p(0.5):.1f}  p99 {p(0.99):.1f}  max {lat[-1]:.1f}")
    if stats.retries or stats.errors:
        click.echo(f"retries: {stats.retries}; errors seen: {dict(stats.errors)}")
    if stats.batches_failed:
        raise click.ClickException(f"{stats.batches_failed} batches were not acknowledged")


async def _run_producer(
    client: ClusterClient,
    topic: str,
    settings: ProducerSettings,
    journal: AckJournal | None,
    producer_id: str,
    count: int,
    rate: float | None,
    show: bool,
) -> ProduceStats:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not show:
        return await Producer(client, topic, settings, journal=journal, producer_id=producer_id).run(
            count, rate
        )
    with Progress(
        TextColumn("[bold]produce[/] {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task(topic, total=count)

        def on_progress(stats: ProduceStats) -> None:
            bar.update(task, completed=stats.records_acked)

        producer = Producer(
            client, topic, settings, journal=journal, producer_id=producer_id, on_progress=on_progress
        )
        return await producer.run(count, rate)


# ---------------------------------------------------------------------------------------------- consume


@cli.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (default: latest).")
@click.option("--max-records", type=int, default=None, help="Stop after this many records.")
@click.option("--timeout-ms", type=int, default=None, help="Stop when nothing arrives for this long.")
@click.option("--print-offsets", is_flag=True, help="Print partition and offset before each value.")
@click.option("--count-only", is_flag=True, help="Print nothing per record; only the summary.")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
def consume(
    topic: str,
    from_beginning: bool,
    max_records: int | None,
    timeout_ms: int | None,
    print_offsets: bool,
    count_only: bool,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Read TOPIC up to the high watermark, printing record values (one per line)."""
    setup_logging("WARNING", "consume")
    out = sys.stdout

    def on_record(r: ConsumedRecord) -> None:
        if count_only:
            return
        value = "" if r.value is None else r.value.decode("utf-8", "replace")
        out.write(f"{r.partition}\t{r.offset}\t{value}\n" if print_offsets else value + "\n")

    async def main() -> tuple[int, float]:
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
        t0 = time.monotonic()
        async with trio.open_nursery() as nursery:
            client = ClusterClient(nursery, bootstrap, client_id="consumer")
            consumer = Consumer(client, topic, from_beginning=from_beginning)
            n = await consumer.run(on_record, max_records=max_records, idle_timeout_ms=timeout_ms)
            await client.aclose()
            nursery.cancel_scope.cancel()
        return n, time.monotonic() - t0

    try:
        n, secs = trio.run(main)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        return
    out.flush()
    click.echo(f"consumed {n:,} records in {secs:.2f}s", err=True)


# ---------------------------------------------------------------------------------------------- health


@cli.command()
@click.argument("address")
@click.option("--timeout", type=float, default=3.0, show_default=True)
def health(address: str, timeout: float) -> None:
    """Exit 0 if the broker or controller at ADDRESS (host:port) answers API_VERSIONS (for healthchecks)."""
    from cli.cluster_client import ClientError, parse_address
    from cli.node_query import ask
    from protocol import ApiKeys

    try:
        host, port = parse_address(address)
    except ClientError as exc:
        raise click.BadParameter(str(exc)) from None
    resp = trio.run(ask, host, port, ApiKeys.API_VERSIONS, {}, timeout)
    if resp is None or resp.get("error_code", 0) != 0:
        raise click.ClickException(f"{address} did not answer API_VERSIONS within {timeout}s")
    click.echo(f"{address} is up ({len(resp.get('api_keys', []))} APIs)")


# ---------------------------------------------------------------------------------------------- the rest


def _register() -> None:
    from cli.cluster import register
    from cli.controller_cmd import controller
    from cli.demo import demo
    from cli.net_cmd import net
    from cli.scenario_cmd import scenario
    from cli.topic_cmd import topic

    cli.add_command(demo)
    cli.add_command(scenario)
    cli.add_command(controller)
    cli.add_command(topic)
    cli.add_command(net)
    register(cli, broker, controller)
    try:
        from cli.bench.command import bench
    except ImportError:  # pragma: no cover - the bench package is optional at import time
        pass
    else:
        cli.add_command(bench)
    try:
        from cli.report_cmd import report
    except ImportError:  # pragma: no cover
        pass
    else:
        cli.add_command(report)


_register()


def main(argv: list[str] | None = None) -> Any:
    return cli.main(args=argv)


if __name__ == "__main__":
    cli()
