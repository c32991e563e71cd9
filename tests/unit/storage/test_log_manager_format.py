"""A data directory written before Kafka's record encoding (msgpack records, no isrsim.record.format in
meta.properties) is refused at start with one line that says why and what to do; an empty one is adopted."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.log import LogConfig
from storage.log_manager import RECORD_FORMAT, RECORD_FORMAT_KEY, LogDirLoadError, LogManager


def manager(log_dir: Path) -> LogManager:
    return LogManager(log_dir, 1, "cluster", LogConfig(), clock=lambda: 0.0)


def old_meta(log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "meta.properties").write_text("version=0\nbroker.id=1\ncluster.id=cluster\n")


def test_a_new_directory_records_the_format(tmp_path: Path) -> None:
    manager(tmp_path / "d").check_meta_properties()
    text = (tmp_path / "d" / "meta.properties").read_text()
    assert f"{RECORD_FORMAT_KEY}={RECORD_FORMAT}\n" in text
    manager(tmp_path / "d").check_meta_properties()  # and starts again


def test_an_old_directory_with_records_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    old_meta(d)
    (d / "t-0").mkdir()
    (d / "t-0" / "00000000000000000000.log").write_bytes(b"\x00" * 80)
    with pytest.raises(LogDirLoadError) as info:
        manager(d).check_meta_properties()
    message = str(info.value)
    assert "\n" not in message
    assert "msgpack records" in message and "delete the directory" in message
    assert RECORD_FORMAT_KEY not in (d / "meta.properties").read_text()


def test_an_old_directory_without_records_is_adopted(tmp_path: Path) -> None:
    d = tmp_path / "d"
    old_meta(d)
    (d / "t-0").mkdir()
    (d / "t-0" / "00000000000000000000.log").write_bytes(b"")
    manager(d).check_meta_properties()
    assert (d / "meta.properties").read_text().endswith(f"{RECORD_FORMAT_KEY}={RECORD_FORMAT}\n")


def test_an_unknown_format_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "meta.properties").write_text(f"version=0\nbroker.id=1\n{RECORD_FORMAT_KEY}=9\n")
    with pytest.raises(LogDirLoadError, match="does not know"):
        manager(d).check_meta_properties()
