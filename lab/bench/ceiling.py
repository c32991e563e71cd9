"""Scenario 1, the ceiling: what this machine can do at all, measured in the same run as everything else.

* loopback TCP: one process sends 1 MiB chunks with trio's ``send_all``, another (``python -m
  lab.bench.ceiling sink``) receives them with trio and answers one byte when it has them all. The time is
  from the first byte sent to that answer. Best of a few rounds.
* file append: 1 MiB ``os.write`` calls to a new file opened ``O_APPEND`` (as the log's segments are),
  no fsync (as the broker's data path), closed at the end; then the file is read back with 1 MiB reads
  (from the page cache: the report job's reading limit). Best of a few rounds.

Every throughput figure of the other scenarios is divided by these.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import trio

from kit.processes import reap
from lab.bench.cluster import BenchError, launch_owned
from lab.bench.context import BenchContext
from lab.bench.results import Figure, ScenarioResult

CHUNK = 1 << 20
_TOTAL = struct.Struct(">Q")


async def _sink() -> None:
    """The receiving process: prints its port, takes one connection, reads the announced number of bytes,
    answers ``k``."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    print(port, flush=True)
    stream = await listeners[0].accept()
    async with stream:
        while True:
            head = b""
            while len(head) < _TOTAL.size:
                data = await stream.receive_some(_TOTAL.size - len(head))
                if not data:
                    return
                head += data
            (total,) = _TOTAL.unpack(head)
            got = 0
            while got < total:
                data = await stream.receive_some(min(CHUNK, total - got))
                if not data:
                    return
                got += len(data)
            await stream.send_all(b"k")


async def loopback_rounds(total_bytes: int, rounds: int) -> list[float]:
    """MB/s of each round (1 MB = 10^6 bytes) between this process and a sink process."""
    proc = launch_owned([sys.executable, "-m", "lab.bench.ceiling", "sink"], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        if not line.strip():
            raise BenchError(f"the loopback sink process exited with {proc.poll()} before listening")
        port = int(line)
        chunk = b"\0" * CHUNK
        rates = []
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            for _ in range(rounds):
                t0 = time.perf_counter()
                await stream.send_all(_TOTAL.pack(total_bytes))
                sent = 0
                while sent < total_bytes:
                    n = min(CHUNK, total_bytes - sent)
                    await stream.send_all(chunk if n == CHUNK else chunk[:n])
                    sent += n
                if await stream.receive_some(1) != b"k":
                    raise BenchError("the loopback sink did not confirm")
                rates.append(total_bytes / (time.perf_counter() - t0) / 1e6)
        return rates
    finally:
        reap(proc)


def file_rounds(directory: Path, total_bytes: int, rounds: int) -> tuple[list[float], list[float]]:
    """MB/s of each round of 1 MiB appends to a fresh file (no fsync), and of reading it back (1 MiB reads,
    from the page cache)."""
    chunk = b"\0" * CHUNK
    rates: list[float] = []
    reads: list[float] = []
    for i in range(rounds):
        path = directory / f"append-{i}.bin"
        t0 = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
        try:
            written = 0
            while written < total_bytes:
                written += os.write(fd, chunk)
        finally:
            os.close(fd)
        rates.append(written / (time.perf_counter() - t0) / 1e6)
        t0 = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            read = 0
            while data := os.read(fd, CHUNK):
                read += len(data)
        finally:
            os.close(fd)
        reads.append(read / (time.perf_counter() - t0) / 1e6)
        path.unlink()
    return rates, reads


async def run(ctx: BenchContext, result: ScenarioResult) -> None:
    p = ctx.params
    rounds = 3
    ctx.step(f"loopback TCP: {rounds} x {p.ceiling_tcp_bytes >> 20} MiB in 1 MiB chunks")
    tcp = await loopback_rounds(p.ceiling_tcp_bytes, rounds)
    ctx.step(f"file append: {rounds} x {p.ceiling_file_bytes >> 20} MiB, no fsync")
    directory = ctx.scenario_dir("ceiling")
    disk, reads = await trio.to_thread.run_sync(file_rounds, directory, p.ceiling_file_bytes, rounds)
    ctx.loopback_mb_s = max(tcp)
    ctx.read_mb_s = max(reads)
    result.add(Figure("loopback_mb_s", "loopback TCP, trio, 1 MiB chunks (best of 3)", max(tcp), "MB/s"))
    result.add(
        Figure("file_append_mb_s", "file append, 1 MiB writes, no fsync (best of 3)", max(disk), "MB/s")
    )
    result.add(
        Figure("file_read_mb_s", "file read back, 1 MiB reads, page cache (best of 3)", max(reads), "MB/s")
    )
    result.details = {
        "file_read_rounds_mb_s": [round(r, 1) for r in reads],
        "loopback_rounds_mb_s": [round(r, 1) for r in tcp],
        "file_append_rounds_mb_s": [round(r, 1) for r in disk],
        "loopback_bytes_per_round": p.ceiling_tcp_bytes,
        "file_bytes_per_round": p.ceiling_file_bytes,
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["sink"]:
        trio.run(_sink)
    else:
        sys.exit("usage: python -m lab.bench.ceiling sink")
