"""kafka-console-producer: the lines of a stream (stdin) produced as records as they are read, each line
parsed by Kafka's line reader (:class:`kit.console.LineReader`)."""

from __future__ import annotations

from functools import partial
from typing import TextIO

import trio

from kit.cluster_client import ClientError
from kit.console import LineReader, LineRecord, PropertyError
from kit.producer import Producer, ProduceStats


async def produce_lines(
    producer: Producer, reader: LineReader, stream: TextIO, *, partition: int | None = None
) -> ProduceStats:
    """The lines of ``stream`` (stdin) as records until its end, sent as they come: a thread reads the lines;
    each round takes every line read so far (up to a few batches), so a pipe is sent in full batches and a
    terminal's line at once. A line that does not parse ends the run with a ClientError naming it (the
    lines before it are sent)."""
    send: trio.MemorySendChannel[list[LineRecord]]
    receive: trio.MemoryReceiveChannel[list[LineRecord]]
    send, receive = trio.open_memory_channel(4)
    lines: trio.MemorySendChannel[str | None]
    line_queue: trio.MemoryReceiveChannel[str | None]
    lines, line_queue = trio.open_memory_channel(producer.settings.batch_records * 4)
    errors: list[str] = []

    def read_stdin() -> None:
        try:
            for line in stream:
                trio.from_thread.run(lines.send, line.rstrip("\n").rstrip("\r"))
        finally:
            trio.from_thread.run(lines.send, None)

    async def parse() -> None:
        number = 0
        async with send:
            while True:
                first = await line_queue.receive()
                if first is None:
                    return
                batch = [first]
                while len(batch) < producer.settings.batch_records * 4:
                    try:
                        batch.append(line_queue.receive_nowait())
                    except trio.WouldBlock:
                        break
                records: list[LineRecord] = []
                for text in batch:
                    if text is None:
                        break
                    number += 1
                    try:
                        records.append(reader.read(text, number))
                    except PropertyError as exc:
                        errors.append(str(exc))  # the lines before it are still sent, as Kafka's
                        break
                if records:
                    await send.send(records)
                if errors or batch[-1] is None:
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.to_thread.run_sync, read_stdin, abandon_on_cancel=True))
        nursery.start_soon(parse)
        stats = await producer.run_records(receive, partition=partition)
        nursery.cancel_scope.cancel()
    if errors:
        raise ClientError(errors[0])
    return stats
