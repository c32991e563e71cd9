"""What ``isrsim chaos`` shows while it runs: one line, refreshed (rich) on a terminal, or a plain line every
few seconds otherwise: the time, the faults in force, records acknowledged, each partition's ISR.

Times are the run's one clock (``kit.run_clock``): seconds since t0, the first event of the run, as the
report shows them; the status line adds how far into its ``--duration`` the run is."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from kit.run_clock import RunClock

PLAIN_EVERY_S = 5.0


@dataclass
class ChaosState:
    """What the progress line shows; the runner's tasks update it."""

    duration_s: float
    phase: str = "workload"
    faults: list[str] = field(default_factory=list)
    records_acked: int = 0
    show_acked: bool = True  # False: the workload is a program of its own (`isrsim run`), not counted here
    isr: dict[int, list[int]] = field(default_factory=dict)
    replicas: dict[int, list[int]] = field(default_factory=dict)
    leaders: dict[int, int] = field(default_factory=dict)


def isr_cell(partition: int, isr: list[int], replicas: list[int], leader: int) -> str:
    """``3:[1,2]`` ; yellow when the ISR lacks a replica, red without a leader."""
    body = f"{partition}:{','.join(str(b) for b in sorted(isr))}"
    if leader < 0:
        return f"[red]{body}[/]"
    if replicas and len(isr) < len(replicas):
        return f"[yellow]{body}[/]"
    return body


def status_line(state: ChaosState, elapsed: float, stamp: str = "") -> str:
    faults = ", ".join(state.faults) if state.faults else "none"
    isr = " ".join(
        isr_cell(p, state.isr[p], state.replicas.get(p, []), state.leaders.get(p, -1))
        for p in sorted(state.isr)
    )
    when = f"{stamp} " if stamp else ""
    acked = f"acked: {state.records_acked:,} records  " if state.show_acked else ""
    return (
        f"{when}run {elapsed:.0f}s/{state.duration_s:g}s  {state.phase}  faults: {faults}  "
        f"{acked}ISR {isr or '?'}"
    )


class ChaosView:
    """A context manager: ``say`` prints an event line; ``refresh`` redraws the status line."""

    def __init__(self, console: Console, state: ChaosState, clock: RunClock | None = None) -> None:
        self.console = console
        self.state = state
        self.clock = clock
        self.t0 = time.monotonic()  # the schedule's 0 s
        self.live: Live | None = None
        self._last_plain = 0.0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def stamp(self) -> str:
        """Now on the run's clock (``  312.4s``); the schedule's own seconds without one."""
        return self.clock.stamp() if self.clock is not None else f"{self.elapsed:6.1f}s"

    def _status(self) -> str:
        return status_line(self.state, self.elapsed, self.clock.stamp().strip() if self.clock else "")

    def __enter__(self) -> ChaosView:
        if self.console.is_terminal:
            self.live = Live(self._line(), console=self.console, refresh_per_second=4, transient=True)
            self.live.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(kind, exc, tb)
            self.live = None
        self.console.print(self._status(), highlight=False)

    def _line(self) -> Text:
        text = Text.from_markup(self._status(), overflow="ellipsis")
        text.no_wrap = True
        return text

    def say(self, markup: str) -> None:
        self.console.print(f"[dim]{self.stamp()}[/]  {markup}", highlight=False)

    def refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._line())
        elif time.monotonic() - self._last_plain >= PLAIN_EVERY_S:
            self._last_plain = time.monotonic()
            self.console.print(self._status(), highlight=False)


__all__ = ["ChaosState", "ChaosView", "isr_cell", "status_line"]
