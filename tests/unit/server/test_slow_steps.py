"""``server.slow_steps``: a step of a task that holds the event loop past the threshold is logged with the
task and where the loop was; quick steps are not."""

from __future__ import annotations

import logging
import time

import pytest
import trio

from server import slow_steps
from server.slow_steps import SlowSteps


def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a blocking call, as a synchronous fsync or import would be


async def main() -> None:
    async def busy() -> None:
        await trio.sleep(0)
        hold_the_loop(0.12)

    async def polite() -> None:
        for _ in range(50):
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(busy, name="busy-task")
        nursery.start_soon(polite, name="polite-task")


def test_a_step_that_holds_the_loop_is_logged_with_its_task_and_where_it_was(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="isrsim.slow_steps"):
        trio.run(main, instruments=[SlowSteps(40)])
    messages = [r.getMessage() for r in caplog.records if r.name == "isrsim.slow_steps"]
    assert len(messages) == 1, messages
    [message] = messages
    assert "by task busy-task" in message
    held_ms = float(message.split("held ")[1].split(" ms")[0])
    assert held_ms >= 100
    assert "in hold_the_loop" in message  # sampled while the step was running


def test_it_is_enabled_by_the_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(slow_steps.ENV, raising=False)
    assert slow_steps.slow_step_instruments() == []
    monkeypatch.setenv(slow_steps.ENV, "0")
    assert slow_steps.slow_step_instruments() == []
    monkeypatch.setenv(slow_steps.ENV, "fast")
    assert slow_steps.slow_step_instruments() == []
    monkeypatch.setenv(slow_steps.ENV, "25")
    [instrument] = slow_steps.slow_step_instruments()
    assert isinstance(instrument, SlowSteps) and instrument.threshold_s == 0.025
