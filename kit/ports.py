"""Is a local TCP port free, and which process holds it (Linux: ``/proc/net/tcp*`` and ``/proc/*/fd``)."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

_LISTEN = "0A"


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True if ``host:port`` can be bound now (as the brokers bind: with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def port_holder(port: int) -> int | None:
    """The pid of a process listening on ``port``, if this user can see it."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
    return None


def describe_busy(port: int, what: str) -> str:
    """``port 9092 (broker 1) is in use by pid 123 (python3 -m ...)``, as much as can be found."""
    pid = port_holder(port)
    holder = ""
    if pid is not None:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = ""
        holder = f" by pid {pid}" + (f" ({cmd.strip()[:80]})" if cmd.strip() else "")
    return f"port {port} ({what}) is in use{holder}"


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now (the OS picks them; all held until all are picked)."""
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
