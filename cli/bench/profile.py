"""Sampling profiles of broker (or bench) processes with py-spy, when it is installed (``pip install
py-spy``; it is not a dependency). ``py-spy record --format raw`` writes collapsed stacks; :func:`summarize`
turns them into the functions and modules where the time goes (self and inclusive shares)."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cli.bench.cluster import reap, spawn

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*?)(?::(?P<line>\d+))?\)$")


def find_py_spy() -> str | None:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


@dataclass
class Recording:
    name: str
    pid: int
    output: Path
    proc: subprocess.Popen[bytes]

    def stop(self, timeout: float = 30.0) -> Path | None:
        """Stops sampling (SIGINT makes py-spy write its output) and returns the output file."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        reap(self.proc)
        return self.output if self.output.exists() and self.output.stat().st_size else None


def start_recording(name: str, pid: int, out_dir: Path, *, rate: int = 100) -> Recording | None:
    exe = find_py_spy()
    if exe is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"profile-{name}.txt"
    proc = spawn(
        [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--output", str(output)],
        log_path=out_dir / f"profile-{name}.log",
    )
    return Recording(name, pid, output, proc)


def _short(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("/site-packages/", "/lib/python3", "/work/main/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    if path.startswith(("11/", "12/", "13/")):  # lib/python3.X/...
        path = "stdlib/" + path.split("/", 1)[1]
    return f"{m.group('func')} ({path})"


def _module(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return "?"
    path = m.group("file")
    if "/site-packages/" in path:
        return path.split("/site-packages/", 1)[1].split("/", 1)[0]
    if "/lib/python3" in path:
        return "stdlib"
    for pkg in ("broker/", "fetcher/", "protocol/", "cli/"):
        if pkg in path:
            rest = path.split(pkg, 1)[1]
            return pkg + rest
    return path


@dataclass
class ProfileSummary:
    samples: int
    self_top: list[tuple[str, float]] = field(default_factory=list)
    inclusive_top: list[tuple[str, float]] = field(default_factory=list)
    modules_self: list[tuple[str, float]] = field(default_factory=list)
    idle_share: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "idle_share": round(self.idle_share, 3),
            "self_top": [[f, round(s, 3)] for f, s in self.self_top],
            "inclusive_top": [[f, round(s, 3)] for f, s in self.inclusive_top],
            "modules_self": [[f, round(s, 3)] for f, s in self.modules_self],
        }


IDLE_LEAVES = ("epoll.poll", "select.epoll", "poll (selectors", "get_events (trio", "_epoll_wait")


def summarize(path: Path, top: int = 15) -> ProfileSummary:
    """Shares of samples (0..1): by leaf function (self), by any function on the stack (inclusive) and by
    module of the leaf. Samples whose leaf is the event loop waiting for I/O count as idle."""
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    mod_c: Counter[str] = Counter()
    total = 0
    idle = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        frames = [f for f in stack.split(";") if f and not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        total += count
        leaf = frames[-1]
        if any(marker in leaf for marker in IDLE_LEAVES) or "get_events" in leaf:
            idle += count
        self_c[_short(leaf)] += count
        mod_c[_module(leaf)] += count
        for f in {_short(f) for f in frames}:
            incl_c[f] += count
    if total == 0:
        return ProfileSummary(0)
    return ProfileSummary(
        samples=total,
        self_top=[(f, n / total) for f, n in self_c.most_common(top)],
        inclusive_top=[(f, n / total) for f, n in incl_c.most_common(top * 2)],
        modules_self=[(f, n / total) for f, n in mod_c.most_common(top)],
        idle_share=idle / total,
    )
