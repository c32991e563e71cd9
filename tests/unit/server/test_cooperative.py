"""``server.cooperative``: long handling gives the event loop back between steps."""

from __future__ import annotations

import threading

import trio

from server.cooperative import Steps, chunks, pure


def test_chunks_and_steps_let_another_task_run_between_steps() -> None:
    seen: list[str] = []

    async def other() -> None:
        while True:
            seen.append("other")
            await trio.sleep(0)

    async def main() -> list[int]:
        sizes = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.sleep(0)
            seen.clear()
            async for part in chunks(list(range(10)), 4):
                seen.append("chunk")
                sizes.append(len(part))
            steps = Steps(3)
            for _ in range(7):
                await steps.tick()
                seen.append("tick")
            nursery.cancel_scope.cancel()
        return sizes

    assert trio.run(main) == [4, 4, 2]
    # Four steps given back (two between the chunks, two among the ticks): the other task ran in them.
    # Without them the work would run in one step, and the other task not at all meanwhile.
    assert seen.count("chunk") == 3 and seen.count("tick") == 7
    assert seen.count("other") >= 3


def test_pure_runs_a_large_requests_work_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()

    async def main() -> tuple[int, int]:
        small = await pure(False, threading.get_ident)
        large = await pure(True, threading.get_ident)
        return small, large

    small, large = trio.run(main)
    assert small == loop_thread and large != loop_thread
