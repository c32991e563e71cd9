"""Real broker processes for integration tests.

A :class:`BrokerProcess` (the kit's, :mod:`kit.processes`, with a test's paths and checks) runs
``python -m cli.main broker start`` (cwd: the repository) on 127.0.0.1 with an OS-assigned port and its
own data directory, and finds the port in the ``broker_started`` line of its ``events.jsonl``. It can be
killed with any signal, stopped cleanly (SIGTERM), restarted on the same data directory (on a new port)
and paused/resumed (SIGSTOP/SIGCONT). Its stderr goes to a file whose tail is shown when a test fails
(see ``conftest.py``).

A :class:`BrokerLauncher` makes brokers and owns them: ``close()`` kills every process it started, which
the fixtures call in their finalizers, so nothing outlives a test even when it fails.

Helpers: :func:`wait_until` / :func:`async_wait_until` poll a condition with a deadline (tests never sleep
for a fixed time); :func:`request` sends one request on a fresh connection; :func:`events` reads a
journal, skipping a torn last line; :func:`run_cli` runs an ``isrsim`` command in a subprocess;
:func:`list_offset` and :func:`read_partition` read a partition's offsets and batches;
:class:`RawConnection` sends arbitrary bytes (malformed frames, pipelined requests) and decodes what
comes back.

Usage::

    def test_x(broker_launcher):
        broker = broker_launcher.start(overrides={"initial.leader.partitions": "t-0"})
        body = trio.run(request, broker.host, broker.port, ApiKeys.METADATA, {"topics": None})
        broker.kill(signal.SIGKILL)
        broker.restart()
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import trio

from kit import processes
from kit.node_query import request as node_request
from kit.processes import WaitTimeout, isrsim_command
from protocol.client import open_connection
from protocol.framing import FrameDecoder, decode_response, encode_request
from server.journal import read_journal

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0

__all__ = ["WaitTimeout"]


# ------------------------------------------------------------------------------------------- waiting


def wait_until(
    cond: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str | Callable[[], str] = "condition",
) -> Any:
    """Polls ``cond`` until it returns a truthy value (which is returned) or ``timeout`` seconds pass
    (:func:`kit.processes.wait_until`). ``message`` (or a callable building it) says what was awaited."""
    return processes.wait_until(cond, timeout, message, interval)


async def async_wait_until(
    cond: Callable[[], Any],
    timeout: float = 10.0,
    interval: float = 0.02,
    message: str | Callable[[], str] = "condition",
) -> Any:
    """:func:`wait_until` for trio tests; ``cond`` may be sync or return an awaitable."""
    return await processes.async_wait_until(cond, timeout, message, interval)


# ------------------------------------------------------------------------------------------- journals


def events(path: Path | str, event: str | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a ``.jsonl`` journal (optionally only those with ``event``). A torn or partial
    line (a writer killed mid-line, or a line still being written) is skipped; a missing file is empty."""
    return read_journal(Path(path), event)


# ------------------------------------------------------------------------------------------- requests


# One request on a new connection (TLS and SASL as ``security=`` says); returns the response body.
request = partial(node_request, client_id="integration-test")


# ------------------------------------------------------------------------------------------- processes


def python_cmd(*args: str) -> list[str]:
    """The command line of ``isrsim ARGS...`` with this interpreter (the venv's)."""
    return isrsim_command(*args)


def run_cli(
    *args: str, timeout: float = 120.0, check: bool = True, cwd: Path = REPO_ROOT
) -> subprocess.CompletedProcess[str]:
    """Runs ``isrsim ARGS...`` to completion and returns its output. ``check`` fails the test on a
    non-zero exit, showing stderr."""
    proc = subprocess.run(
        python_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"isrsim {' '.join(args)} exited with {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}"
        )
    return proc


class BrokerProcess(processes.BrokerProcess):
    """One broker of a test (:class:`kit.processes.BrokerProcess`): ``data_dir`` holds its log dir
    (``data/``) and its output (``broker-<id>.stderr``, whose tail is shown when a test fails)."""

    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        overrides: Mapping[str, str] | None = None,
        *,
        log_level: str = "INFO",
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.data_dir = data_dir
        super().__init__(
            broker_id,
            data_dir / "data",
            log_path=data_dir / f"broker-{broker_id}.stderr",
            overrides=overrides,
            log_level=log_level,
            cwd=REPO_ROOT,
            preexec=preexec,
        )

    @property
    def stderr_path(self) -> Path:
        assert self.log_path is not None
        return self.log_path

    @property
    def address(self) -> str:  # type: ignore[override]
        return f"{self.host}:{self.port}"

    def stderr_tail(self, lines: int = 40) -> str:
        return self.log_tail(lines)

    def launch(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        super().launch()

    def wait_started(self, timeout: float = START_TIMEOUT_S) -> int:
        return super().wait_started(timeout)

    def start(self, timeout: float = START_TIMEOUT_S) -> int:
        return super().start(timeout)

    def wait_exit(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """Waits for the process to exit; returns its exit code."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(
                f"broker {self.broker_id} (pid {self.proc.pid}) did not exit within {timeout}s; "
                f"stderr tail:\n{self.stderr_tail()}"
            ) from None

    def kill(self, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT_S) -> int:
        return super().kill(sig, timeout)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Clean stop (SIGTERM); asserts exit code 0 and a ``broker_stopped`` line for this run."""
        pid = self.pid
        code = self.kill(signal.SIGTERM, timeout)
        assert code == 0, f"broker {self.broker_id} exited with {code} on SIGTERM:\n{self.stderr_tail()}"
        stopped = [e for e in self.events() if e.get("event") in ("broker_started", "broker_stopped")]
        assert stopped and stopped[-1]["event"] == "broker_stopped", (
            f"broker {self.broker_id} (pid {pid}) wrote no broker_stopped after its last start"
        )

    def restart(self, timeout: float = START_TIMEOUT_S) -> int:
        """Starts again on the same data directory (if still running, it is stopped cleanly first).
        Returns the new port."""
        if self.is_running():
            self.stop()
        return self.start(timeout)

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"BrokerProcess(id={self.broker_id}, {self.address}, {state}, dir={self.data_dir})"


class BrokerLauncher:
    """Makes brokers under ``root`` and kills them all on :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers: list[BrokerProcess] = []

    def create(
        self, broker_id: int = 1, overrides: Mapping[str, str] | None = None, **kwargs: Any
    ) -> BrokerProcess:
        directory = self.root / f"broker-{broker_id}-{len(self.brokers)}"
        broker = BrokerProcess(broker_id, directory, overrides, **kwargs)
        self.brokers.append(broker)
        return broker

    def start(
        self, broker_id: int = 1, overrides: Mapping[str, str] | None = None, **kwargs: Any
    ) -> BrokerProcess:
        broker = self.create(broker_id, overrides, **kwargs)
        broker.start()
        return broker

    def start_many(
        self, ids: Sequence[int], overrides: Mapping[str, str] | None = None
    ) -> list[BrokerProcess]:
        """Starts several brokers in parallel (each takes a moment to import) and waits for all."""
        brokers = [self.create(i, overrides) for i in ids]
        for b in brokers:
            b.launch()
        for b in brokers:
            b.wait_started()
        return brokers

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()


# ------------------------------------------------------------------------------------------- raw sockets


# ------------------------------------------------------------------------------------------- log views


async def list_offset(
    host: str, port: int, topic: str, partition: int, *, replica_id: int = -2, timestamp: int = -1
) -> int:
    """LIST_OFFSETS for one partition: latest (-1) or earliest (-2); latest is the HW for consumers
    (replica_id -1) and the LEO for debug (-2) and brokers. Fails on an error code."""
    body = {
        "replica_id": replica_id,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }
    resp = await request(host, port, 2, body)
    part = resp["topics"][0]["partitions"][0]
    assert part["error_code"] == 0, f"LIST_OFFSETS {topic}-{partition}: {part}"
    return int(part["offset"])


def fetch_body(
    topic: str,
    partition: int,
    offset: int,
    *,
    replica_id: int = -2,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 8 << 20,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
) -> dict[str, Any]:
    return {
        "replica_id": replica_id,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
    }


READ_PARTITION_TIMEOUT_S = 60.0


async def read_partition(
    host: str, port: int, topic: str, partition: int, *, replica_id: int = -2, start: int = 0
) -> bytes:
    """Every batch of a partition from ``start`` up to the HW (what FETCH returns to ``replica_id``),
    fetched in steps on one connection, concatenated as they came off the log. A read that does not reach
    the end in ``READ_PARTITION_TIMEOUT_S`` (an offset that does not move) fails instead of hanging."""
    from protocol.records import iter_batches

    out = bytearray()
    offset = start
    async with open_connection(host, port, client_id="integration-test") as conn:
        with trio.fail_after(READ_PARTITION_TIMEOUT_S):
            while True:
                resp = await conn.request(1, fetch_body(topic, partition, offset, replica_id=replica_id))
                assert resp["error_code"] == 0, f"FETCH {topic}-{partition}@{offset}: {resp}"
                part = resp["responses"][0]["partitions"][0]
                assert part["error_code"] == 0, f"FETCH {topic}-{partition}@{offset}: {part}"
                records: bytes = part["records"]
                if not records:
                    return bytes(out)
                for _, header in iter_batches(records):
                    offset = header.next_offset
                out += records


class RawConnection:
    """A TCP connection that sends whatever bytes a test wants and decodes the responses that come back
    (for malformed input and pipelining tests). Use as ``async with RawConnection(host, port) as raw``."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._stream: trio.SocketStream | None = None
        self._decoder = FrameDecoder(2**31 - 1)
        self.closed_by_peer = False

    async def __aenter__(self) -> RawConnection:
        self._stream = await trio.open_tcp_stream(self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._stream is not None:
            await trio.aclose_forcefully(self._stream)

    async def send(self, data: bytes) -> None:
        assert self._stream is not None
        await self._stream.send_all(data)

    async def send_eof(self) -> None:
        """Half-closes the connection: no more requests, responses may still come."""
        assert self._stream is not None
        await self._stream.send_eof()

    async def send_request(
        self, api_key: int, body: Any, *, correlation_id: int = 1, api_version: int = 0
    ) -> None:
        await self.send(encode_request(api_key, api_version, correlation_id, "integration-test", body))

    async def _receive(self) -> bool:
        assert self._stream is not None
        try:
            chunk = await self._stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            chunk = b""
        if not chunk:
            self.closed_by_peer = True
            return False
        self._decoder.feed(chunk)
        return True

    async def receive_responses(self, n: int, timeout: float = 10.0) -> list[tuple[int, dict[str, Any]]]:
        """The next ``n`` responses as (correlation_id, body); fails if the connection closes or they do
        not all arrive within ``timeout``."""
        out: list[tuple[int, dict[str, Any]]] = []
        with trio.fail_after(timeout):
            while len(out) < n:
                while len(out) < n and (payload := self._decoder.next_frame()) is not None:
                    out.append(decode_response(payload))
                if len(out) < n and not await self._receive():
                    raise AssertionError(f"connection closed after {len(out)} of {n} responses")
        return out

    async def wait_closed(self, timeout: float = 5.0) -> bool:
        """True if the broker closes the connection within ``timeout`` (anything it sends first is kept
        in the decoder); False if it is still open."""
        with trio.move_on_after(timeout):
            while await self._receive():
                pass
            return True
        return False
