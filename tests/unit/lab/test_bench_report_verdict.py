"""Scenario (7) of the bench reads the report's exit code as a verdict on the bench's own data (0 valid,
1 invalid, 3 unknown), never as the job failing, and shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.bench.context import BenchContext, Params
from lab.bench.report_job import REPORT_VERDICTS, _verdict
from lab.bench.results import ScenarioResult


@pytest.mark.parametrize(("code", "word"), [(0, "VALID"), (1, "INVALID"), (3, "UNKNOWN")])
def test_every_exit_code_of_the_report_is_a_verdict(code: int, word: str, tmp_path: Path) -> None:
    notes: list[str] = []
    ctx = BenchContext(root=tmp_path, params=Params.smallest(), on_note=notes.append)
    result = ScenarioResult("report", "7. report job")
    checks = [{"name": "acked_not_lost", "verdict": "valid"}]
    if code:
        checks.append({"name": "no_duplicates", "verdict": REPORT_VERDICTS[code]})
    _verdict(ctx, result, "(7) report job", "", {"checks": checks}, code)
    [figure] = result.figures
    assert figure.key == "report_exit_code" and figure.value == code
    assert figure.label == f"(7) report job: verdict {word}"
    if code:
        assert figure.note == f"no_duplicates {REPORT_VERDICTS[code]}"
        assert notes == [f"(7) report job: {REPORT_VERDICTS[code]}: no_duplicates {REPORT_VERDICTS[code]}"]
    else:
        assert figure.note == "every check valid" and notes == []
