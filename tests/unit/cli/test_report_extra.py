"""Without the report's extra (``pip install isrsim`` alone), ``isrsim report`` and ``isrsim demo`` say in
one line what to install instead of failing on an import, and the demo says it before starting a cluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import report_cmd
from cli.main import cli


@pytest.fixture
def without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module no installation has, in the list the check looks for.
    monkeypatch.setattr(report_cmd, "REPORT_EXTRA_MODULES", ("pyspark", "isrsim_no_such_module"))


@pytest.mark.parametrize("command", ["report", "demo"])
def test_says_what_to_install(without_the_extra: None, command: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, [command, "--data-dir", str(tmp_path / "root")])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "isrsim_no_such_module missing" in lines[0]
    assert "pip install 'isrsim[report]'" in lines[0]
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not (tmp_path / "root").exists()  # the demo started no cluster


def test_the_base_dependencies_run_every_process() -> None:
    # Brokers and the controller serve /metrics: prometheus_client is a base dependency, not the report's.
    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    assert any(r.startswith("prometheus_client") for r in project["dependencies"])
    report = project["optional-dependencies"]["report"]
    assert not any(r.startswith("prometheus_client") for r in report)
    # The check in ``isrsim report`` looks for what the extra installs.
    assert sorted(report_cmd.REPORT_EXTRA_MODULES) == sorted(r.split(">")[0].split("<")[0] for r in report)
