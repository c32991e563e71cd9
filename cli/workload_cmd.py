"""``isrsim produce`` and ``isrsim consume``: the workload commands (kafka-console-producer/-consumer).

Errors the user can act on (no cluster, unknown topic) end in one line that says what to do; Ctrl-C
prints the summary so far and exits with 130, as a shell expects of an interrupted command.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import click
import trio

from cli.client_run import run_client
from cli.main import setup_logging
from kit.cluster_client import ClientError, ClusterClient, bootstrap_from
from kit.consumer import ConsumedRecord, Consumer
from kit.group_member import GroupMember
from kit.producer import ACKS_BY_NAME, AckJournal, Producer, ProducerSettings, ProduceStats

INTERRUPTED_EXIT = 130  # 128 + SIGINT

DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    envvar="ISRSIM_DATA_DIR",
    help="Cluster root made by `isrsim cluster up` (default ./isrsim-data, or $ISRSIM_DATA_DIR).",
)
BOOTSTRAP_OPTION = click.option(
    "--bootstrap-server", default=None, help="host:port[,host:port] of brokers (instead of --data-dir)."
)


# ---------------------------------------------------------------------------------------------- produce


def produce_summary(stats: ProduceStats, count: int, interrupted: bool = False) -> list[str]:
    """The lines `produce` ends with (text, for people and for grep)."""
    secs = max(stats.elapsed, 1e-9)
    head = "interrupted: " if interrupted else ""
    of = f" of {count:,}" if interrupted or stats.records_acked != count else ""
    lines = [
        f"{head}{stats.records_acked:,}{of} records acknowledged in {secs:.2f}s: "
        f"{stats.records_acked / secs:,.0f} records/s, {stats.bytes_acked / secs / 1e6:.2f} MB/s"
    ]
    if stats.latencies_ms:
        lat = sorted(stats.latencies_ms)

        def p(q: float) -> float:
            return lat[min(len(lat) - 1, int(q * len(lat)))]

        lines.append(f"latency ms: p50 {p(0.5):.1f}  p99 {p(0.99):.1f}  max {lat[-1]:.1f}")
    if stats.retries or stats.errors:
        lines.append(f"retries: {stats.retries}; errors seen: {stats.errors_seen()}")
    return lines


@dataclass
class _ProduceRun:
    """What a run has done so far, readable after Ctrl-C."""

    producer: Producer | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def stats(self) -> ProduceStats:
        if self.producer is None:
            stats = ProduceStats(started=self.started)
            stats.finished = time.monotonic()
            return stats
        return self.producer.stats


DEFAULT_REQUEST_TIMEOUT_MS = 30_000
TIMEOUT_MS_DEPRECATED = (
    "warning: `isrsim produce --timeout-ms` is deprecated: use --request-timeout-ms (the request "
    "timeout); --timeout-ms is the consumer's idle exit in `isrsim consume`, as in Kafka's tools"
)


def _request_timeout(request_timeout_ms: int | None, timeout_ms: int | None) -> int:
    """--request-timeout-ms, or the deprecated --timeout-ms (with a one-line notice on stderr)."""
    if timeout_ms is not None:
        if request_timeout_ms is not None and request_timeout_ms != timeout_ms:
            raise click.UsageError(
                f"--request-timeout-ms {request_timeout_ms} and its deprecated name --timeout-ms "
                f"{timeout_ms} disagree: give --request-timeout-ms only"
            )
        click.echo(TIMEOUT_MS_DEPRECATED, err=True)
        return timeout_ms
    return request_timeout_ms if request_timeout_ms is not None else DEFAULT_REQUEST_TIMEOUT_MS


@click.command()
@click.argument("topic")
@click.option(
    "--count",
    type=int,
    default=None,
    help="Produce COUNT numbered records; without it, read records from stdin, one per line "
    "(kafka-console-producer).",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="How stdin lines are read, as kafka-console-producer: parse.key=true, key.separator=SEP (default "
    "tab), parse.headers=true (h1:v1,h2:v2 then headers.delimiter, default tab, before the key), "
    "headers.separator, headers.key.separator, null.marker, ignore.error.",
)
@click.option(
    "--partition",
    type=click.IntRange(0),
    default=None,
    help="Send every record read from stdin to this partition (default: by key, key-less ones in turn).",
)
@click.option("--acks", type=click.Choice(["all", "-1", "1", "0"]), default="all", show_default=True)
@click.option("--record-size", type=int, default=100, show_default=True, help="Bytes per record value.")
@click.option("--batch-records", type=int, default=200, show_default=True, help="Records per batch.")
@click.option("--rate", type=float, default=None, help="Records per second (default: as fast as possible).")
@click.option(
    "--max-in-flight", type=int, default=5, show_default=True, help="Requests in flight per partition."
)
@click.option(
    "--request-timeout-ms",
    type=click.IntRange(1),
    default=None,
    help="How long a PRODUCE request waits for its answer, and its timeout_ms (Kafka's "
    "request.timeout.ms; default 30000).",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(1),
    default=None,
    help="Deprecated: the old name of --request-timeout-ms here (in `isrsim consume`, as in Kafka's "
    "console consumer, --timeout-ms is the idle exit).",
)
@click.option(
    "--delivery-timeout-ms",
    type=click.IntRange(1),
    default=120_000,
    show_default=True,
    help="Give up on a batch not acknowledged this long after it was first sent, retries included "
    "(Kafka's delivery.timeout.ms).",
)
@click.option(
    "--retry-backoff-ms",
    type=click.IntRange(0),
    default=100,
    show_default=True,
    help="First back-off after a retriable error; it doubles per retry up to --retry-backoff-max-ms, "
    "with +-20% jitter (KIP-580).",
)
@click.option("--retry-backoff-max-ms", type=click.IntRange(0), default=1000, show_default=True)
@click.option(
    "--compression-type",
    type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
    default="none",
    show_default=True,
    help="Compress each batch with this codec, in Kafka's framing (Kafka's compression.type).",
)
@click.option(
    "--acked-journal",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for acked-<producer_id>.jsonl (default: <data-dir>/workload, with --bootstrap-server "
    "too, so that the report can check every acknowledged batch).",
)
@click.option(
    "--idempotence/--no-idempotence",
    default=None,
    help="An idempotent producer (KIP-98; Kafka's enable.idempotence): a producer id, epoch and sequences "
    "on every batch, so a retried batch is written once and in order. Default: on with --acks all, off "
    "otherwise; --idempotence with --acks 0 or 1 is an error (as Kafka's).",
)
@click.option(
    "--transactional-id",
    default=None,
    help="Produce the --count records in transactions with this transactional.id, through librdkafka "
    "(the clients extra; docs/transactions.md).",
)
@click.option(
    "--transaction-records",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Records per transaction (with --transactional-id).",
)
@click.option(
    "--abort-every",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Abort every K-th transaction instead of committing it (0: commit all).",
)
@click.option("--no-acked-journal", is_flag=True, help="Write no workload journal.")
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
    request_timeout_ms: int | None,
    timeout_ms: int | None,
    delivery_timeout_ms: int,
    retry_backoff_ms: int,
    retry_backoff_max_ms: int,
    compression_type: str,
    idempotence: bool | None,
    acked_journal: Path | None,
    no_acked_journal: bool,
    progress: bool | None,
    properties: tuple[str, ...],
    partition: int | None,
    transactional_id: str | None,
    transaction_records: int,
    abort_every: int,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Read lines from standard input and produce each as a record to TOPIC, until end of input, as
    kafka-console-producer does (--property parse.key=true key.separator=: parse.headers=true, --partition);
    with --count, produce COUNT numbered records instead and print the throughput (a load generator).

    Retriable errors (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER, a lost connection) are retried with
    exponential back-off until --delivery-timeout-ms; they are shown on the progress line and logged
    (at most one line per error every 5 s). Exits 1 if a batch was not acknowledged, 130 on Ctrl-C.
    """
    setup_logging("WARNING", "produce")
    request_timeout_ms = _request_timeout(request_timeout_ms, timeout_ms)
    if transactional_id is not None:
        _produce_transactions(
            topic,
            transactional_id,
            count,
            transaction_records,
            abort_every,
            record_size,
            data_dir,
            bootstrap_server,
        )
        return
    reader = None
    if count is None:
        from kit.console import READER_KEYS, LineReader, PropertyError, parse_properties
        from kit.console_producer import produce_lines

        try:
            reader = LineReader.from_properties(parse_properties(properties, READER_KEYS))
        except PropertyError as exc:
            raise click.BadParameter(str(exc), param_hint="--property") from None
    elif properties or partition is not None:
        raise click.UsageError("--property and --partition shape the records read from stdin: drop --count")
    if (count or 0) < 0 or record_size < 0 or batch_records < 1 or max_in_flight < 1:
        raise click.BadParameter(
            "--count and --record-size must be >= 0, --batch-records/--max-in-flight >= 1"
        )
    if idempotence and ACKS_BY_NAME[acks] != -1:
        raise click.BadParameter(
            "must set --acks all to use the idempotent producer (otherwise idempotence cannot be "
            "guaranteed); or pass --no-idempotence",
            param_hint="--idempotence",
        )
    settings = ProducerSettings(
        acks=ACKS_BY_NAME[acks],
        idempotence=idempotence is not False,
        record_size=record_size,
        batch_records=batch_records,
        max_in_flight=max_in_flight,
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        retry_backoff_max_ms=max(retry_backoff_ms, retry_backoff_max_ms),
        compression_type=compression_type,
    )
    journal_dir = (
        None if no_acked_journal else (acked_journal or (data_dir or Path("isrsim-data")) / "workload")
    )
    show = (sys.stderr.isatty() if progress is None else progress) and count is not None
    run = _ProduceRun()

    async def main() -> ProduceStats:
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
        producer_id = f"{int(time.time())}-{os.getpid()}"
        journal = AckJournal(journal_dir, producer_id) if journal_dir is not None else None
        try:
            async with trio.open_nursery() as nursery:
                client = ClusterClient(nursery, bootstrap, client_id=f"producer-{producer_id}")
                producer = Producer(client, topic, settings, journal=journal, producer_id=producer_id)
                run.producer = producer
                if reader is None:
                    stats = await _run_producer(producer, count or 0, rate, show)
                else:
                    stats = await produce_lines(producer, reader, sys.stdin, partition=partition)
                await client.aclose()
                nursery.cancel_scope.cancel()
            return stats
        finally:
            if journal is not None:
                journal.close()

    try:
        stats = run_client(main)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        for line in produce_summary(run.stats, _intended(run.stats, count), interrupted=True):
            click.echo(line, err=reader is not None)
        sys.exit(INTERRUPTED_EXIT)
    for line in produce_summary(stats, _intended(stats, count)):
        # Read from stdin, the summary goes to stderr: stdout stays the console producer's (silent).
        click.echo(line, err=reader is not None)
    if stats.batches_failed:
        raise click.ClickException(
            f"{stats.records_failed:,} records in {stats.batches_failed} batches were not acknowledged "
            f"(last error {stats.last_error}); see `isrsim cluster status` or `isrsim topic describe {topic}`"
        )


def _intended(stats: ProduceStats, count: int | None) -> int:
    return stats.records_sent if count is None else count


QUIET_SAY_S = 5.0  # without a progress bar, a wait this long with no acknowledgement is said on stderr


def stall_line(stats: ProduceStats, count: int, quiet_s: float) -> str:
    """What a producer with no progress bar says when nothing was acknowledged for ``quiet_s`` seconds."""
    waiting = stats.records_sent - stats.records_acked - stats.records_failed
    line = (
        f"produce: {stats.records_acked:,} of {count:,} records acknowledged; none for {quiet_s:.0f}s, "
        + (f"{waiting:,} waiting" if stats.records_sent else "still finding the partitions' leaders")
    )
    return line + (f" (last error {stats.last_error})" if stats.last_error else "")


async def _say_stalls(producer: Producer, count: int, done: trio.Event) -> None:
    """Says on stderr, every QUIET_SAY_S, that records wait and none is acknowledged (no silent wait)."""
    acked = -1
    since = said = time.monotonic()
    while not done.is_set():
        with trio.move_on_after(QUIET_SAY_S / 5):
            await done.wait()
        stats = producer.stats
        now = time.monotonic()
        settled = stats.records_acked + stats.records_failed
        waiting = stats.records_sent > settled or settled < count  # sent and unanswered, or not sent yet
        if stats.records_acked != acked or not waiting:
            acked, since, said = stats.records_acked, now, now
        elif now - said >= QUIET_SAY_S:
            click.echo(stall_line(stats, count, now - since), err=True)
            said = now


async def _run_producer(producer: Producer, count: int, rate: float | None, show: bool) -> ProduceStats:
    if not show:
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_say_stalls, producer, count, done)
            try:
                return await producer.run(count, rate)
            finally:
                done.set()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]produce[/] {task.description}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]:>8,.0f} rec/s  retries {task.fields[retries]}{task.fields[error]}"),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        task = bar.add_task(producer.topic, total=count, rate=0.0, retries=0, error="")

        def on_progress(stats: ProduceStats) -> None:
            error = f"  last error: [yellow]{stats.last_error}[/]" if stats.last_error else ""
            bar.update(
                task, completed=stats.records_acked, rate=stats.rate, retries=stats.retries, error=error
            )

        producer.on_progress = on_progress
        return await producer.run(count, rate)


def _produce_transactions(
    topic: str,
    transactional_id: str,
    count: int | None,
    transaction_records: int,
    abort_every: int,
    record_size: int,
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """``--transactional-id``: COUNT records in transactions (kit/transactional_producer.py)."""
    from kit.librdkafka_producer import read_properties
    from kit.transactional_producer import TransactionStats, run_transactions

    if count is None or count < 0:
        raise click.UsageError("--transactional-id needs --count N (records to produce in transactions)")

    def progress(stats: TransactionStats) -> None:
        if sys.stderr.isatty():
            click.echo(
                f"\r{stats.committed} committed, {stats.aborted} aborted transactions", nl=False, err=True
            )

    try:
        stats = run_transactions(
            bootstrap_from(bootstrap_server, data_dir),
            topic,
            transactional_id,
            count,
            transaction_records=transaction_records,
            abort_every=abort_every,
            record_size=record_size,
            # A secure cluster's client.properties (cluster up --secure), as librdkafka reads it.
            properties=read_properties(props)
            if (props := (data_dir or Path("isrsim-data")) / "client.properties").is_file()
            else None,
            on_transaction=progress,
        )
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    if sys.stderr.isatty():
        click.echo("", err=True)
    click.echo(
        f"{stats.committed} transactions committed ({stats.committed_records} records), "
        f"{stats.aborted} aborted ({stats.aborted_records} records), transactional id {transactional_id}"
    )


# ---------------------------------------------------------------------------------------------- consume


@click.command()
@click.argument("topic")
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset (default: latest).")
@click.option("--partition", type=click.IntRange(0), default=None, help="Read only this partition.")
@click.option(
    "--offset",
    default=None,
    metavar="earliest|latest|N",
    help="Where to start in --partition: earliest, latest (the default) or an offset.",
)
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="What to print, as kafka-console-consumer: print.key=true, print.headers=true, print.offset=true, "
    "print.partition=true, print.timestamp=true, print.value=false, key.separator (default tab), "
    "headers.separator, line.separator, null.literal. The value comes last.",
)
@click.option(
    "--max-messages",
    "--max-records",
    "max_messages",
    type=click.IntRange(0),
    default=None,
    help="Stop after this many records (--max-records is the same option).",
)
@click.option(
    "--timeout-ms", type=click.IntRange(0), default=None, help="Stop when nothing arrives for this long."
)
@click.option(
    "-e",
    "--exit-at-end",
    is_flag=True,
    help="Stop when every partition is read up to its high watermark (kcat -e).",
)
@click.option(
    "--group",
    "group_id",
    default=None,
    help="Consume as a member of this consumer group: its share of the partitions, from the committed "
    "offsets, committing as it reads (kafka-console-consumer --group).",
)
@click.option(
    "--print-offsets",
    is_flag=True,
    help="Print partition and offset before each record (then what --property print.* asks for).",
)
@click.option(
    "--isolation-level",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
    help="read_committed: only committed transactions' records, up to the last stable offset "
    "(docs/transactions.md).",
)
@click.option(
    "--count-only", is_flag=True, help="Print no records; a running count on a terminal, then the total."
)
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
def consume(
    topic: str,
    from_beginning: bool,
    max_messages: int | None,
    timeout_ms: int | None,
    exit_at_end: bool,
    group_id: str | None,
    print_offsets: bool,
    isolation_level: str,
    count_only: bool,
    partition: int | None,
    offset: str | None,
    properties: tuple[str, ...],
    data_dir: Path | None,
    bootstrap_server: str | None,
) -> None:
    """Read records from TOPIC and print them on standard output, one per line, as kafka-console-consumer
    does: the value, after the key, headers, partition and offset that --property print.*=true asks for.

    Like Kafka's console consumer it keeps reading new records until --max-messages were read, nothing
    arrived for --timeout-ms, the end was reached with --exit-at-end, or Ctrl-C (exit 130). On exit it
    prints "Processed a total of N messages" on stderr.
    """
    setup_logging("WARNING", "consume")
    from kit.console import FORMATTER_KEYS, Formatter, PropertyError, parse_properties

    try:
        formatter = Formatter.from_properties(parse_properties(properties, FORMATTER_KEYS))
    except PropertyError as exc:
        raise click.BadParameter(str(exc), param_hint="--property") from None
    if group_id is not None and partition is not None:
        raise click.UsageError(
            "--group and --partition cannot be given together (a group assigns the partitions)"
        )
    start_offset: int | None = None
    if offset is not None:
        if partition is None:
            raise click.UsageError("--offset needs --partition (the offset of which partition?)")
        if from_beginning:
            raise click.UsageError("--from-beginning and --offset cannot be given together")
        if offset == "earliest":
            from_beginning = True
        elif offset != "latest":
            try:
                start_offset = int(offset)
            except ValueError:
                start_offset = -1
            if start_offset < 0:
                raise click.BadParameter(
                    f"{offset!r}: earliest, latest or an offset >= 0", param_hint="--offset"
                ) from None
    out = sys.stdout
    live = count_only and sys.stderr.isatty()
    shown = [0.0]
    consumer_ref: list[Consumer] = []

    def on_record(r: ConsumedRecord) -> None:
        if count_only:
            if live and time.monotonic() - shown[0] >= 0.5:
                shown[0] = time.monotonic()
                sys.stderr.write(f"\r{consumer_ref[0].consumed + 1:,} messages")
                sys.stderr.flush()
            return
        line = formatter.format(
            partition=r.partition,
            offset=r.offset,
            timestamp=r.timestamp,
            key=r.key,
            value=r.value,
            headers=r.headers,
        )
        if print_offsets:
            # Partition and offset first, then what --property asks for (the value by default).
            line = f"{r.partition}\t{r.offset}\t{line or formatter.line_separator}"
        out.write(line)

    async def main() -> int:
        bootstrap = bootstrap_from(bootstrap_server, data_dir)
        async with trio.open_nursery() as nursery:
            client = ClusterClient(nursery, bootstrap, client_id="consumer")
            group = None if group_id is None else GroupMember(client, group_id, [topic])
            consumer = Consumer(
                client,
                topic,
                from_beginning=from_beginning,
                group=group,
                partition=partition,
                offset=start_offset,
                isolation_level=1 if isolation_level == "read_committed" else 0,
            )
            consumer_ref.append(consumer)
            n = await consumer.run(
                on_record, max_records=max_messages, idle_timeout_ms=timeout_ms, until_end=exit_at_end
            )
            await client.aclose()
            nursery.cancel_scope.cancel()
        return n

    def finish(n: int) -> None:
        out.flush()
        if live:
            sys.stderr.write("\r")
        click.echo(f"Processed a total of {n:,} messages", err=True)

    try:
        n = run_client(main)
    except ClientError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        finish(consumer_ref[0].consumed if consumer_ref else 0)
        sys.exit(INTERRUPTED_EXIT)
    finish(n)
