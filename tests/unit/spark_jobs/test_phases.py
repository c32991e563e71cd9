"""The report's progress where stderr is not a terminal (a CI log): a phase still running after
PROGRESS_LINE_S says so, a phase's progress (files, MB) is a line at most that often, every phase ends with
its time; no Spark session."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from spark_jobs import report_job
from spark_jobs.report_job import Phases


def test_progress_lines_of_slow_phases_in_a_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_job, "PROGRESS_LINE_S", 0.3)
    out = io.StringIO()
    phases = Phases(Console(file=out, width=120))
    with phases.phase("quick"):
        phases.update("1/1 files")
    with phases.phase("slow"):
        time.sleep(0.5)
    with phases.phase("reading"):
        for i in range(1, 9):
            time.sleep(0.1)
            phases.update(f"{i}/8 files")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("quick: ") and "slow ..." in lines
    assert lines.index("slow ...") < next(i for i, x in enumerate(lines) if x.startswith("slow: "))
    progress = [x for x in lines if x.startswith("reading: ") and "files" in x]
    assert 1 <= len(progress) <= 3 and progress[0] != "reading: 8/8 files"
    assert lines[-1].startswith("reading: ") and lines[-1].endswith("s")
    assert set(phases.timings) == {"quick", "slow", "reading"}
