"""The one process launcher of the project: start an ``isrsim`` node (or any command) as a process of its own,
wait for the line a node writes to its journal once it serves, signal it, wait for its exit, stop it.

Two kinds of caller use it:

- a cluster made by ``isrsim cluster up`` (:mod:`kit.local_cluster`): its processes outlive the command
  that starts them and are found again by pid (``cluster.json``): :func:`launch`, :func:`wait_started`,
  and the pid functions :func:`process_state`, :func:`send_signal`, :func:`wait_exit`,
  :func:`stop_process`;
- a program that owns its nodes (a benchmark, a test's fixture): :class:`NodeProcess` and
  :class:`BrokerProcess`, killed by ``close()`` and, whatever happens, when the interpreter exits.

Every process runs in a session of its own, so a Ctrl-C of the caller does not reach it; the caller stops
it. Waiting always has a deadline: :func:`wait_until` (and :func:`async_wait_until` under trio) poll a
condition and raise :class:`WaitTimeout` saying what was awaited.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

from broker import read_journal
from kit.errors import ClusterError, KitError
from protocol import EVENTS_FILE

T = TypeVar("T")

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0


class WaitTimeout(KitError):
    """A condition did not become true in time; the message says what was awaited."""


class NodeExited(ClusterError):
    """A node's process exited while it was starting; the message shows the end of its log."""

    def __init__(self, message: str, returncode: int) -> None:
        super().__init__(message)
        self.returncode = returncode


# ------------------------------------------------------------------------------------------------ waiting


def wait_until(
    cond: Callable[[], T | None],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.05,
) -> T:
    """Polls ``cond`` until it returns something truthy (returned), for at most ``timeout`` seconds.
    ``what`` (or a function making it, called on failure) says what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"timed out after {timeout:.1f}s waiting for {what() if callable(what) else what}"
            )
        time.sleep(interval)


async def async_wait_until(
    cond: Callable[[], Any],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.05,
) -> Any:
    """:func:`wait_until` under trio; ``cond`` may be a plain function or a coroutine function."""
    import trio

    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"timed out after {timeout:.1f}s waiting for {what() if callable(what) else what}"
            )
        await trio.sleep(interval)


# ------------------------------------------------------------------------------------------------ launching


def isrsim_command(*args: str) -> list[str]:
    """The command line of ``isrsim ARGS...`` with this interpreter (the one the project is installed in)."""
    return [sys.executable, "-m", "cli.main", *args]


# Processes started by a program that owns them: killed when the interpreter exits, however it exits.
_OWNED: set[subprocess.Popen[bytes]] = set()


@atexit.register
def kill_owned() -> None:
    """Kills every owned process that still runs (at exit, or by a runner that is giving up)."""
    for proc in list(_OWNED):
        reap(proc, 5)


def launch(
    args: Sequence[str],
    log_path: Path | None,
    *,
    owned: bool = False,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    banner: str | None = None,
    stdout: int | IO[Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Starts ``args`` in a session of its own, stdin closed, stdout and stderr appended to ``log_path``
    (after the line ``banner``, if given; no log: discarded, or to ``stdout`` if given), in ``env``.
    ``owned``: killed when this interpreter exits (a benchmark's or a test's process); else it outlives the
    caller (a node of a cluster made by ``cluster up``)."""
    out: int | IO[Any] = subprocess.DEVNULL if stdout is None else stdout
    log: IO[bytes] | None = None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 (the child has its own copy; ours is closed below)
        if banner is not None:
            log.write(f"{banner}\n".encode())
            log.flush()
        out = log
    try:
        proc = subprocess.Popen(
            list(args),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec_fn,
            env=env,
        )
    finally:
        if log is not None:
            log.close()
    if owned:
        _OWNED.add(proc)
    return proc


def reap(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_S) -> int:
    """Kills ``proc`` (SIGKILL) if it still runs and waits for it; its exit code (-9 if it will not go)."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.kill()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = -9
    _OWNED.discard(proc)
    return code


def tail_of(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, or ``(no log)``."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start_line(
    proc: subprocess.Popen[bytes], journal: Path, event: str, what: str, log_path: Path | None
) -> dict[str, Any] | None:
    """The ``event`` line that ``proc`` wrote to ``journal`` (matched by its pid), or None if none yet.
    Raises :class:`NodeExited` (with the end of its log) if the process exited instead."""
    for line in reversed(read_journal(journal, event)):
        if line.get("pid") == proc.pid:
            return dict(line)
    code = proc.poll()
    if code is not None:
        tail = tail_of(log_path) if log_path is not None else "(no log)"
        hint = ""
        if "cannot listen" in tail or "Address already in use" in tail:
            hint = "\nthe port is in use: stop what holds it or choose another --base-port"
        raise NodeExited(f"{what} exited with code {code} while starting; {log_path}:\n{tail}{hint}", code)
    return None


def wait_started(
    proc: subprocess.Popen[bytes],
    journal: Path,
    event: str,
    what: str,
    log_path: Path | None,
    timeout: float = START_TIMEOUT_S,
) -> dict[str, Any]:
    """Waits for ``proc``'s ``event`` line (``broker_started``, ``controller_started``: host, port, pid)."""
    try:
        return wait_until(
            lambda: start_line(proc, journal, event, what, log_path), timeout, f"{what} to start"
        )
    except WaitTimeout:
        raise ClusterError(f"{what} did not start within {timeout:.0f}s; see {log_path}") from None


# ------------------------------------------------------------------------------------------------ by pid


def process_state(pid: int | None) -> str:
    """ "running", "paused" (SIGSTOP), or "stopped"."""
    if not pid:
        return "stopped"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "stopped"
    except PermissionError:
        return "running"
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "running"
    if state == "Z":
        return "stopped"
    return "paused" if state in ("T", "t") else "running"


def send_signal(pid: int | None, sig: signal.Signals) -> bool:
    """Sends ``sig``; False if there is no such process."""
    if not pid:
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_exit(pid: int | None, timeout: float) -> bool:
    """Whether the process is gone within ``timeout`` seconds (a child of ours is reaped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_state(pid) == "stopped":
            _reap_pid(pid)
            return True
        time.sleep(0.05)
    return False


def _reap_pid(pid: int | None) -> None:
    if not pid:
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_process(pid: int | None, timeout: float) -> str:
    """SIGTERM (clean stop; resumes a paused process first), then SIGKILL after ``timeout``."""
    state = process_state(pid)
    if state == "stopped":
        return "not running"
    if state == "paused":
        send_signal(pid, signal.SIGCONT)
    send_signal(pid, signal.SIGTERM)
    if wait_exit(pid, timeout):
        return "stopped cleanly"
    send_signal(pid, signal.SIGKILL)
    wait_exit(pid, 5)
    return f"killed after {timeout:.0f}s"


# ------------------------------------------------------------------------------------------------ owned nodes


class NodeProcess:
    """A node that a program owns: its command, its journal and its log, and at most one running process
    at a time. ``close()`` kills it (as the interpreter's exit does)."""

    start_event = "broker_started"

    def __init__(
        self,
        name: str,
        *,
        journal: Path,
        log_path: Path | None,
        cwd: Path | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._journal = journal
        self.log_path = log_path
        self.cwd = cwd
        # Run in the child before it starts (resource limits, say); None for none.
        self.preexec = preexec
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = -1
        self.starts = 0
        self.paused = False

    @property
    def journal(self) -> Path:
        """Where the node writes its journal (``events.jsonl``)."""
        return self._journal

    def command(self) -> list[str]:
        raise NotImplementedError

    # ---------------------------------------------------------------- state

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise ClusterError(f"{self.name} is not running")
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        return read_journal(self.journal, event)

    def log_tail(self, lines: int = 40) -> str:
        return tail_of(self.log_path, lines) if self.log_path is not None else "(no log)"

    # ---------------------------------------------------------------- lifecycle

    def launch(self) -> None:
        """Starts the process without waiting (see :meth:`wait_started`)."""
        if self.is_running():
            raise ClusterError(f"{self.name} is already running")
        self.proc = launch(
            self.command(),
            self.log_path,
            owned=True,
            cwd=self.cwd,
            preexec_fn=self.preexec,
            banner=f"---- start #{self.starts + 1} ----",
        )
        self.paused = False
        self.starts += 1
        self.port = -1

    def _started(self) -> dict[str, Any] | None:
        if self.proc is None:
            raise ClusterError(f"{self.name} was never launched")
        return start_line(self.proc, self.journal, self.start_event, self.name, self.log_path)

    def _take(self, line: dict[str, Any]) -> int:
        self.host, self.port = str(line["host"]), int(line["port"])
        return self.port

    def _waiting_for(self) -> str:
        return f"{self.name} (pid {self.pid}) to write {self.start_event}; log tail:\n{self.log_tail()}"

    def wait_started(self, timeout: float = START_TIMEOUT_S) -> int:
        """Waits for this run's start line (matched by pid); returns the port. Raises :class:`NodeExited`
        at once if the process exits instead."""
        return self._take(wait_until(self._started, timeout, self._waiting_for))

    async def wait_started_async(self, timeout: float = START_TIMEOUT_S) -> int:
        """:meth:`wait_started` under trio."""
        return self._take(await async_wait_until(self._started, timeout, self._waiting_for))

    def start(self, timeout: float = START_TIMEOUT_S) -> int:
        """Starts the process and waits until it serves; returns the port."""
        self.launch()
        return self.wait_started(timeout)

    def send_signal(self, sig: int) -> None:
        if self.proc is not None and self.is_running():
            self.proc.send_signal(sig)

    def pause(self) -> None:
        """SIGSTOP: it keeps its sockets and answers nothing."""
        self.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.send_signal(signal.SIGCONT)
        self.paused = False

    def _signal_for_exit(self, sig: int) -> subprocess.Popen[bytes] | None:
        """Sends ``sig`` (resuming a paused process, unless the signal is SIGKILL, so that it can act on
        it); the process to wait for, or None if none runs."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return None
        proc.send_signal(sig)
        if self.paused and sig != signal.SIGKILL:
            self.resume()
        return proc

    def _exited(self, proc: subprocess.Popen[bytes]) -> int:
        _OWNED.discard(proc)
        self.paused = False
        return proc.returncode

    def kill(self, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT_S) -> int:
        """Sends ``sig`` and waits for the exit; the exit code (of the last run, if none runs)."""
        proc = self._signal_for_exit(sig)
        if proc is None:
            return self.proc.returncode if self.proc is not None else 0
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(
                f"{self.name} (pid {proc.pid}) did not exit within {timeout:.0f}s; "
                f"log tail:\n{self.log_tail()}"
            ) from None
        return self._exited(proc)

    async def kill_async(self, sig: int = signal.SIGKILL, timeout: float = STOP_TIMEOUT_S) -> int:
        """:meth:`kill` under trio (the wait does not block the event loop)."""
        proc = self._signal_for_exit(sig)
        if proc is None:
            return self.proc.returncode if self.proc is not None else 0
        try:
            await async_wait_until(lambda: proc.poll() is not None, timeout, f"{self.name} to exit", 0.02)
        except WaitTimeout:
            reap(proc)
            raise
        return self._exited(proc)

    def close(self) -> None:
        """Kills the process if it runs; never raises."""
        if self.proc is not None:
            reap(self.proc)
        self.paused = False


class BrokerProcess(NodeProcess):
    """A broker that no controller manages (``isrsim broker start --id N --override ...``), on 127.0.0.1
    with an OS-assigned port: leadership is given to it with LEADER_AND_ISR, or by
    ``initial.leader.partitions``. ``log_dir`` is its ``log.dirs``; its journal is in ``journal_dir`` (by
    default the log dir)."""

    def __init__(
        self,
        broker_id: int,
        log_dir: Path,
        *,
        log_path: Path | None,
        overrides: Mapping[str, str] | None = None,
        journal_dir: Path | None = None,
        log_level: str = "INFO",
        cwd: Path | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_dir = log_dir
        self.log_level = log_level
        self.overrides: dict[str, str] = {
            "listeners": "127.0.0.1:0",
            "log.dirs": str(log_dir),
            **({"journal.dir": str(journal_dir)} if journal_dir is not None else {}),
            **(overrides or {}),
        }
        super().__init__(f"broker {broker_id}", journal=Path(), log_path=log_path, cwd=cwd, preexec=preexec)

    @property
    def journal(self) -> Path:
        return Path(self.overrides.get("journal.dir") or self.log_dir) / EVENTS_FILE

    @property
    def events_path(self) -> Path:
        return self.journal

    def command(self) -> list[str]:
        args = ["broker", "start", "--id", str(self.broker_id), "--log-level", self.log_level]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return isrsim_command(*args)

    def launch(self) -> None:
        self.log_dir.parent.mkdir(parents=True, exist_ok=True)
        super().launch()


class ControllerProcess(NodeProcess):
    """A controller run by a program (``isrsim controller start --override ...``) on 127.0.0.1 with an
    OS-assigned port; its metadata and journal in ``directory``."""

    start_event = "controller_started"

    def __init__(
        self,
        directory: Path,
        *,
        log_path: Path | None,
        overrides: Mapping[str, str] | None = None,
        node_id: int = 1000,
        log_level: str = "INFO",
        cwd: Path | None = None,
    ) -> None:
        self.directory = directory
        self.log_level = log_level
        self.overrides: dict[str, str] = {
            "node.id": str(node_id),
            "listeners": "127.0.0.1:0",
            "metadata.log.dir": str(directory),
            **(overrides or {}),
        }
        super().__init__("the controller", journal=directory / EVENTS_FILE, log_path=log_path, cwd=cwd)

    def command(self) -> list[str]:
        args = ["controller", "start", "--log-level", self.log_level]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return isrsim_command(*args)

    def launch(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        super().launch()
