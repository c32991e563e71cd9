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

from kit.processes import reap
from lab.bench.cluster import launch_owned

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
    proc = launch_owned(
        [exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--output", str(output)],
        log_path=out_dir / f"profile-{name}.log",
    )
    return Recording(name, pid, output, proc)


_REPO_ROOT = str(Path(__file__).resolve().parents[2]) + "/"


def _short(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    path = m.group("file")
    for marker in ("/site-packages/", "/lib/python3", _REPO_ROOT):
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
    """Shares (0..1) of the busy samples: those whose leaf is not a thread or event loop waiting."""

    samples: int
    idle_share: float = 0.0
    self_top: list[tuple[str, float]] = field(default_factory=list)
    inclusive_top: list[tuple[str, float]] = field(default_factory=list)
    modules_self: list[tuple[str, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "idle_share": round(self.idle_share, 3),
            "busy_self_top": [[f, round(s, 3)] for f, s in self.self_top],
            "busy_inclusive_top": [[f, round(s, 3)] for f, s in self.inclusive_top],
            "busy_modules_self": [[f, round(s, 3)] for f, s in self.modules_self],
        }


# Leaves that mean "waiting": trio's event loop in epoll, idle worker threads, sleeps.
IDLE_LEAVES = (
    "get_events (trio/",
    "Condition.wait (threading",
    "WorkerThread._work (trio/",
    "Event.wait (threading",
    "Thread._wait_for_tstate_lock",
    "select (selectors",
    "poll (selectors",
)
_GENERIC = (
    "<module> (",
    "_run_code (",
    "_run_module_as_main (",
    "Command.",
    "Group.invoke",
    "Context.invoke",
)


def summarize(path: Path, top: int = 15) -> ProfileSummary:
    """Where the busy samples are: by leaf function (self), by any function on the stack (inclusive) and by
    the leaf's module; plus the share of samples that were waiting."""
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
        leaf = _short(frames[-1])
        if any(marker in leaf for marker in IDLE_LEAVES):
            idle += count
            continue
        self_c[leaf] += count
        mod_c[_module(frames[-1])] += count
        for f in {_short(f) for f in frames}:
            if not f.startswith(_GENERIC):
                incl_c[f] += count
    busy = total - idle
    if busy <= 0:
        return ProfileSummary(total, 1.0 if total else 0.0)
    return ProfileSummary(
        samples=total,
        idle_share=idle / total,
        self_top=[(f, n / busy) for f, n in self_c.most_common(top)],
        # Frames on (nearly) every busy stack (the entry points, trio's run loop) say nothing.
        inclusive_top=[(f, n / busy) for f, n in incl_c.most_common() if n / busy < 0.9][: top * 2],
        modules_self=[(f, n / busy) for f, n in mod_c.most_common(top)],
    )
