"""A cluster root on disk (docs/storage.md): ``cluster.json``, ``controller/``, ``broker-<id>/``,
``workload/``; and the processes it names: start them detached, find their ports in their journals, signal
them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker import read_journal

CLUSTER_FILE = "cluster.json"
CONTROLLER_ID = 1000


class ClusterError(Exception):
    """A problem the user can fix; the message says how."""


@dataclass
class ProcessEntry:
    id: int
    host: str
    port: int
    pid: int | None
    dir: str
    config: str
    log: str
    journal: str
    data_dir: str = ""
    # The Prometheus /metrics port (`metrics.port`), 0 when off (docs/metrics.md).
    metrics_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else None


@dataclass
class ClusterInfo:
    root: str
    cluster_id: str
    controller: ProcessEntry
    brokers: list[ProcessEntry] = field(default_factory=list)
    created_ms: int = 0
    # What `cluster up` was given when it made the root: brokers, base_port, overrides (key -> value).
    settings: dict[str, Any] = field(default_factory=dict)

    def broker(self, broker_id: int) -> ProcessEntry:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        known = ", ".join(str(b.id) for b in self.brokers)
        raise ClusterError(f"no broker {broker_id} in this cluster (brokers: {known})")

    def save(self) -> None:
        path = Path(self.root) / CLUSTER_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, root: Path) -> ClusterInfo:
        path = root / CLUSTER_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster at {root} ({path} does not exist); "
                f"start one with `isrsim cluster up --data-dir {root}`"
            ) from None
        except ValueError as exc:
            raise ClusterError(
                f"{path} is not valid JSON ({exc}); remove the directory and run cluster up"
            ) from None
        return cls(
            root=raw["root"],
            cluster_id=raw["cluster_id"],
            controller=ProcessEntry(**raw["controller"]),
            brokers=[ProcessEntry(**b) for b in raw["brokers"]],
            created_ms=raw.get("created_ms", 0),
            settings=raw.get("settings", {}),
        )


# ---------------------------------------------------------------------------------------------- processes


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


def journal_events(path: Path, event: str) -> list[dict[str, Any]]:
    return read_journal(path, event)


def spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """Starts ``isrsim ARGS`` detached (own session, so it outlives this command), output to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_started(
    proc: subprocess.Popen[bytes],
    journal: Path,
    event: str,
    seen_before: int,
    what: str,
    log_path: Path,
    timeout: float,
) -> dict[str, Any]:
    """Waits for a new ``event`` line (host, port, pid) in ``journal``; explains a process that died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = journal_events(journal, event)
        if len(started) > seen_before and started[-1].get("pid") == proc.pid:
            return started[-1]
        if proc.poll() is not None:
            tail = tail_of(log_path)
            hint = ""
            if "cannot listen" in tail or "Address already in use" in tail:
                hint = "\nthe port is in use: stop what holds it or choose another --base-port"
            raise ClusterError(
                f"{what} exited with code {proc.returncode} while starting; {log_path}:\n{tail}{hint}"
            )
        time.sleep(0.05)
    raise ClusterError(f"{what} did not start within {timeout:.0f}s; see {log_path}")


def tail_of(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def send_signal(pid: int | None, sig: signal.Signals) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_exit(pid: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process_state(pid) == "stopped":
            _reap(pid)
            return True
        time.sleep(0.05)
    return False


def _reap(pid: int | None) -> None:
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


def write_properties(path: Path, values: dict[str, Any], *, secret: bool = False) -> None:
    """A properties file; ``secret`` (it holds a password): created with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# written by `isrsim cluster up`; edit and `isrsim broker restart` to apply"]
    lines += [f"{k}={v}" for k, v in values.items()]
    text = "\n".join(lines) + "\n"
    if secret:
        from broker import write_secret_file

        write_secret_file(path, text)
        return
    path.write_text(text, encoding="utf-8")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (the OS picks them; all held until all are picked)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
