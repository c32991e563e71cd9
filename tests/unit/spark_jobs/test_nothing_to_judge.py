"""`isrsim report` on a root with nothing to judge: exit 3 (unknown) with one line on stdout, Spark never
started, never a traceback (docs/report.md, "Verdicts and exit codes")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.report_job import EXIT_UNKNOWN, main


def _cluster_up_then_down(root: Path, *, partitions: bool = False) -> Path:
    """What `cluster up` then `cluster down` leaves: brokers' data directories with their checkpoints and
    journals, the controller's journal, no segment bytes (with ``partitions``: a topic created, never
    written to, so its segments are empty files)."""
    for b in (1, 2, 3):
        data = root / f"broker-{b}" / "data"
        data.mkdir(parents=True)
        (data / "meta.properties").write_text(f"version=0\nbroker.id={b}\ncluster.id=c\n")
        for name in (
            "replication-offset-checkpoint",
            "recovery-point-offset-checkpoint",
            "log-start-offset-checkpoint",
        ):
            (data / name).write_text("0\n0\n")
        if partitions:
            part = data / "t-0"
            part.mkdir()
            (part / f"{0:020d}.log").write_bytes(b"")
            (part / f"{0:020d}.index").write_bytes(b"")
            (part / "leader-epoch-checkpoint").write_text("0\n0\n")
        events = [
            {"ts_ms": 1000 + b, "broker_id": b, "event": "broker_started"},
            {"ts_ms": 2000 + b, "broker_id": b, "event": "broker_stopped", "clean": True},
        ]
        (root / f"broker-{b}" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (root / "controller").mkdir()
    (root / "controller" / "events.jsonl").write_text('{"ts_ms": 999, "controller_id": 1000}\n')
    (root / "cluster.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    ("shape", "says"),
    [
        ("missing", "does not exist"),
        ("empty", "is empty"),
        ("up-then-down", "holds no record batch and no acknowledged batch"),
        ("topic-never-written", "holds no record batch and no acknowledged batch"),
    ],
)
def test_nothing_to_judge_is_unknown_in_one_line(
    shape: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    if shape == "empty":
        root.mkdir()
    elif shape == "up-then-down":
        _cluster_up_then_down(root)
    elif shape == "topic-never-written":
        _cluster_up_then_down(root, partitions=True)

    def no_spark(*_: object) -> None:
        raise AssertionError("Spark must not start when there is nothing to judge")

    monkeypatch.setattr("spark_jobs.report_job.build_session", no_spark)
    assert main(["--data-dir", str(root)]) == EXIT_UNKNOWN
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"isrsim report: UNKNOWN; nothing to judge: {root} {says}" + _tail(says)]
    assert err == ""
    if shape in ("missing", "empty"):
        assert not root.exists() or [p.name for p in root.iterdir()] == []  # nothing made there
    else:
        report = json.loads((root / "report" / "report.json").read_text())
        assert report["verdict"] == "unknown" and report["checks"] == []
        # Run again: the report directory the first run left changes nothing.
        assert main(["--data-dir", str(root)]) == EXIT_UNKNOWN


def _tail(says: str) -> str:
    return " (nothing was written to it)" if says.startswith("holds") else ""
