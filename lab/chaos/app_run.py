"""``isrsim run`` (docs/your-application.md): the chaos run (:mod:`lab.chaos.run`) with the user's own
program as the workload: a child process, any language, any Kafka client, told where the cluster is by
its environment.

1. The program starts with ``KAFKA_BOOTSTRAP_SERVERS``, ``ISRSIM_DATA_DIR``, ``ISRSIM_SEED`` and
   ``ISRSIM_CLIENT_PROPERTIES``; its output (stdout and stderr) goes to ``<root>/workload/app-<n>.log`` and
   to the terminal, each line prefixed.
2. The seeded nemesis plays the schedule while the program runs (none with ``--no-faults``).
3. When the program exits or ``--duration`` ends, the nemesis stops; a program still running gets SIGTERM,
   then SIGKILL after ``TERM_GRACE_S``. Whatever is still broken is healed, and the run waits until the
   replicas are in sync.

The brokers' journals (acked.jsonl, client-activity.jsonl, served.jsonl, the coordinator's events) say
what the program asked and was told, so nothing is needed of the program itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

import trio
from rich.markup import escape

from kit.cluster_files import ClusterInfo
from lab.chaos.run import NO_WORKLOAD, ChaosRun
from lab.chaos.schedule import Schedule
from lab.chaos.view import ChaosView
from protocol import CLIENT_PROPERTIES, ProtocolFaultRule, wall_clock_ms

TERM_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this long
OUTPUT_GRACE_S = 2.0  # after the program exits, how long its output may still drain (a child of it holds it)


def app_log_path(root: Path) -> Path:
    """``<root>/workload/app-<n>.log``, the first ``n`` not taken."""
    workload = root / "workload"
    workload.mkdir(parents=True, exist_ok=True)
    n = 1
    while (workload / f"app-{n}.log").exists():
        n += 1
    return workload / f"app-{n}.log"


def app_environment(
    base: Mapping[str, str], bootstrap: Sequence[tuple[str, int]], root: Path, seed: int, properties: Path
) -> dict[str, str]:
    """The program's environment: ours, plus where the cluster is and how to talk to it."""
    env = dict(base)
    env["KAFKA_BOOTSTRAP_SERVERS"] = ",".join(f"{h}:{p}" for h, p in bootstrap)
    env["ISRSIM_DATA_DIR"] = str(root)
    env["ISRSIM_SEED"] = str(seed)
    env["ISRSIM_CLIENT_PROPERTIES"] = str(properties)
    env.setdefault("PYTHONUNBUFFERED", "1")  # a Python program's lines show as they are printed
    return env


def client_properties(root: Path, bootstrap: Sequence[tuple[str, int]]) -> Path:
    """The properties file the program is pointed at: ``<root>/workload/client.properties``, with
    ``bootstrap.servers`` and, on a secure cluster, the root's ``client.properties`` keys (SASL_SSL)."""
    lines = [
        "# written by `isrsim run` (docs/your-application.md): librdkafka's keys",
        "bootstrap.servers=" + ",".join(f"{h}:{p}" for h, p in bootstrap),
    ]
    secure = root / CLIENT_PROPERTIES
    if secure.is_file():
        for raw in secure.read_text(encoding="utf-8").splitlines():
            line = raw.strip()
            if line and not line.startswith("#") and not line.startswith("bootstrap.servers"):
                lines.append(line)
    path = root / "workload" / CLIENT_PROPERTIES
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it may hold a password
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


class AppRun(ChaosRun):
    """The chaos run whose workload is ``command``; ``exit_code`` is the program's (None: never started)."""

    def __init__(
        self,
        info: ClusterInfo,
        schedule: Schedule,
        command: Sequence[str],
        env: Mapping[str, str],
        log_path: Path,
        converge_timeout: float,
        view: ChaosView,
        *,
        faults: bool = True,
        rules: Sequence[ProtocolFaultRule] = (),
    ) -> None:
        super().__init__(
            info, schedule, "", 1.0, -1, [], converge_timeout, view, client=NO_WORKLOAD, rules=list(rules)
        )
        self.command = list(command)
        self.env = dict(env)
        self.log_path = log_path
        self.faults = faults
        self.exit_code: int | None = None
        self.stopped_by: str | None = None  # "SIGTERM" or "SIGKILL" when the run stopped the program
        self.app_label = log_path.stem  # app-1
        self._play_scope = trio.CancelScope()

    async def _work(self, work: trio.Nursery) -> None:
        """The program (started in ``work``) and the fault schedule (or, with ``--no-faults``, the run's
        duration), until the schedule ends or the program exits."""
        work.start_soon(self._app)
        with self._play_scope:
            if self.faults:
                await self._play()
            else:
                await trio.sleep(self.schedule.duration_s)
        self.state.phase = "stopping the program"

    async def _app(self) -> None:
        """Runs the program to its end (or stops it once ``stop_workload`` is set); its exit ends the
        nemesis' schedule early."""
        with open(self.log_path, "ab") as log:
            proc = await trio.lowlevel.open_process(
                self.command,
                stdin=None,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=False,
            )
            self.view.say(
                f"started {escape(' '.join(self.command))} (pid {proc.pid}); output in {self.log_path}"
            )
            try:
                async with trio.open_nursery() as nursery:
                    assert proc.stdout is not None
                    pump = trio.CancelScope()
                    nursery.start_soon(self._pump, proc.stdout, log, pump)
                    nursery.start_soon(self._stop_when_asked, proc)
                    code = await proc.wait()
                    self.exit_code = code
                    self.outcome.workload_stopped_ms = wall_clock_ms()
                    self.view.say(f"{self.app_label} exited with code {code}" + self._signal_said(code))
                    self._play_scope.cancel()
                    pump.deadline = trio.current_time() + OUTPUT_GRACE_S
                    await trio.sleep(0)
                    # The output's end (EOF) or the grace period, then the stopper is not needed.
                    while not pump.cancel_called and not self._pump_done:
                        await trio.sleep(0.05)
                    nursery.cancel_scope.cancel()
            finally:
                if proc.returncode is None:  # interrupted (Ctrl-C) or failed: the program goes too
                    await _terminate(proc)

    _pump_done = False

    async def _pump(self, stream: trio.abc.ReceiveStream, log: IO[bytes], scope: trio.CancelScope) -> None:
        """Tees the program's output to its log and, prefixed, to the terminal, line by line."""
        pending = b""
        with scope:
            async for chunk in stream:
                log.write(chunk)
                log.flush()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._show(line)
        if pending:
            self._show(pending)
        self._pump_done = True

    def _show(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace").rstrip("\r")
        self.view.say(f"[cyan]{self.app_label}|[/] {escape(text)}")

    async def _stop_when_asked(self, proc: trio.Process) -> None:
        await self.stop_workload.wait()
        if proc.returncode is None:
            self.view.say(f"--duration is over: stopping {self.app_label} (SIGTERM)")
            self.stopped_by = "SIGTERM"
            stopped = await _terminate(proc)
            if stopped == "SIGKILL":
                self.stopped_by = "SIGKILL"
                self.view.say(f"[yellow]{self.app_label} did not stop in {TERM_GRACE_S:g}s: killed[/]")

    def _signal_said(self, code: int) -> str:
        if code < 0:
            try:
                return f" (signal {signal.Signals(-code).name})"
            except ValueError:
                return f" (signal {-code})"
        return ""


async def _terminate(proc: trio.Process) -> str:
    """SIGTERM, then SIGKILL after ``TERM_GRACE_S``; shielded, so it runs to its end when cancelled too.
    Returns the signal that ended it."""
    with trio.CancelScope(shield=True):
        try:
            proc.terminate()
        except ProcessLookupError:
            return "SIGTERM"
        with trio.move_on_after(TERM_GRACE_S):
            await proc.wait()
        if proc.returncode is not None:
            return "SIGTERM"
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return "SIGKILL"


__all__ = ["AppRun", "app_environment", "app_log_path", "client_properties"]
