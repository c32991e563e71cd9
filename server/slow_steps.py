"""A diagnostic for a node's event loop: every step of a trio task that holds the loop longer than a
threshold is logged (WARNING, logger ``isrsim.slow_steps``) with the task's name, its duration, and where the
loop was while it was held (the main thread's stack, sampled once by a watchdog thread when the step passes
the threshold). A broker or a controller serves everything on one loop, so such a step delays every request,
fetch and heartbeat of the node at once.

Enabled by ``ISRSIM_SLOW_STEP_MS=<ms>`` in the environment of ``isrsim broker start`` or ``isrsim controller
start`` (and of ``isrsim cluster up``, whose nodes inherit it); off otherwise, at no cost.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

import trio

log = logging.getLogger("isrsim.slow_steps")

ENV = "ISRSIM_SLOW_STEP_MS"
# The project's own frames are what explains a step; the interpreter's and the libraries' are left out.
_OWN = (
    "/broker/",
    "/controller/",
    "/raft/",
    "/coordinator/",
    "/storage/",
    "/server/",
    "/fetcher/",
    "/protocol/",
    "/kit/",
    "/cli/",
)


class SlowSteps(trio.abc.Instrument):
    def __init__(self, threshold_ms: float) -> None:
        self.threshold_s = threshold_ms / 1000
        self._main = threading.get_ident()
        self._started: float | None = None
        self._stack: str | None = None
        self._step = 0
        self._watchdog = threading.Thread(target=self._watch, name="slow-step-watchdog", daemon=True)
        self._watchdog.start()

    def _watch(self) -> None:
        sampled = -1
        while True:
            time.sleep(min(self.threshold_s / 3, 0.005))
            started, step = self._started, self._step
            if started is None or step == sampled or time.perf_counter() - started < self.threshold_s:
                continue
            sampled = step
            frame = sys._current_frames().get(self._main)
            if frame is not None:
                self._stack = _own_frames(frame)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._step += 1
        self._stack = None
        self._started = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        started, self._started = self._started, None
        if started is None:
            return
        took = time.perf_counter() - started
        if took >= self.threshold_s:
            where = self._stack or "  (not sampled)"
            log.warning("event loop held %.1f ms by task %s; it was at:\n%s", took * 1000, task.name, where)


def _own_frames(frame: object) -> str:
    lines = traceback.format_stack(frame)  # type: ignore[arg-type]
    own = [line for line in lines if any(part in line for part in _OWN)]
    return "".join(own[-12:] or lines[-6:]).rstrip()


def slow_step_instruments() -> list[trio.abc.Instrument]:
    """The instruments to pass to ``trio.run``: a :class:`SlowSteps` if ``ISRSIM_SLOW_STEP_MS`` is set to a
    positive number, else none."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return []
    try:
        threshold = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds; the slow-step log is off", ENV, raw)
        return []
    return [SlowSteps(threshold)] if threshold > 0 else []
