"""Lazy subcommands, configuration warnings and dump-log, without processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from cli.config_check import unknown_variables
from cli.dump_log_cmd import dump_log
from cli.main import cli
from protocol import build_simple_batch

REPO_ROOT = Path(__file__).resolve().parents[3]


def _modules_after(*argv: str) -> set[str]:
    code = (
        "import sys\nfrom cli.main import cli\ntry:\n"
        f"    cli.main({list(argv)!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_help_loads_no_subcommand() -> None:
    loaded = _modules_after("--help")
    heavy = {"trio", "rich", "pyspark", "msgpack", "cli.workload_cmd", "cli.cluster", "cli.bench_cmd"}
    assert not heavy & loaded, heavy & loaded


def test_a_command_loads_only_its_own_module() -> None:
    loaded = _modules_after("topic", "list", "--help")
    assert "cli.topic_cmd" in loaded
    assert not {"cli.workload_cmd", "cli.bench_cmd", "cli.report_cmd", "pyspark", "rich"} & loaded


def test_every_listed_command_loads() -> None:
    runner = CliRunner()
    for name in (
        "broker",
        "controller",
        "cluster",
        "topic",
        "produce",
        "consume",
        "net",
        "dump-log",
        "health",
    ):
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)


def test_unknown_isrsim_variables_are_named() -> None:
    env = {"ISRSIM_BROKER_ID": "1", "ISRSIM_MIN_INSYNC_REPLICA": "2", "ISRSIM_DATA_DIR": "x", "PATH": "/"}
    assert unknown_variables(["broker.id", "min.insync.replicas"], env) == ["ISRSIM_MIN_INSYNC_REPLICA"]


def test_variables_isrsim_itself_reads_are_not_called_unknown() -> None:
    # The slow-step log every node honours, and what `isrsim run` hands the program (which may call the CLI).
    env = {
        "ISRSIM_SLOW_STEP_MS": "50",
        "ISRSIM_SEED": "7",
        "ISRSIM_CLIENT_PROPERTIES": "/x",
        "ISRSIM_NUM_X": "1",
    }
    assert unknown_variables(["broker.id"], env) == ["ISRSIM_NUM_X"]


def _segment(tmp_path: Path) -> Path:
    partition = tmp_path / "t-0"
    partition.mkdir()
    first = build_simple_batch([b"a", b"b", b"c"])
    second = bytearray(build_simple_batch([b"d"]))
    second[0:8] = (3).to_bytes(8, "big")  # base offset 3 (the CRC does not cover it)
    path = partition / "00000000000000000000.log"
    path.write_bytes(first + bytes(second))
    return path


def test_dump_log_lists_batches_with_offsets_and_crc(tmp_path: Path) -> None:
    path = _segment(tmp_path)
    result = CliRunner().invoke(dump_log, [str(path.parent)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("baseOffset")]
    assert len(lines) == 2
    assert lines[0].startswith("baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1")
    assert "compresscodec: none" in lines[0]
    assert lines[1].startswith("baseOffset: 3 lastOffset: 3 count: 1")
    assert all(line.endswith("isvalid: true") for line in lines)
    data = json.loads(CliRunner().invoke(dump_log, [str(path), "-o", "json", "--print-data-log"]).output)
    assert [r["payload"] for b in data[0]["batches"] for r in b["records"]] == ["a", "b", "c", "d"]


def test_dump_log_reports_a_bad_crc_and_a_torn_tail(tmp_path: Path) -> None:
    path = _segment(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # a byte of the second batch's last record
    path.write_bytes(bytes(data) + b"\x00" * 20)  # and a torn tail
    result = CliRunner().invoke(dump_log, [str(path)])
    assert result.exit_code == 1
    assert "isvalid: false" in result.output and "isvalid: true" in result.output
    assert "Found a problem at position" in result.output


def test_the_healthcheck_loads_no_cluster_or_workload_module() -> None:
    loaded = _modules_after("health", "--help")
    assert "cli.health_cmd" in loaded
    assert not {"cli.cluster", "cli.broker_cmd", "cli.workload_cmd", "rich", "pyspark"} & loaded


def test_dump_log_prints_records_of_compressed_batches_as_kafka_dump_log(tmp_path: Path) -> None:
    from protocol.record_codec import Record
    from protocol.records import build_batch

    partition = tmp_path / "c-0"
    partition.mkdir()
    records = [Record(0, 0, b"k0", b"v0", (("h", b"1"), ("g", None))), Record(1, 5, None, b"v1")]
    path = partition / "00000000000000000000.log"
    path.write_bytes(build_batch(records, base_timestamp=1_000, attributes=4))  # zstd
    result = CliRunner().invoke(dump_log, [str(path), "--print-data-log"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("compresscodec: zstd" in line and line.endswith("isvalid: true") for line in lines)
    first = "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [h,g]"
    assert first + " key: k0 payload: v0" in lines
    assert (
        "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [] payload: v1"
        in lines
    )
    data = json.loads(CliRunner().invoke(dump_log, [str(path), "-o", "json", "--print-data-log"]).output)
    assert data[0]["batches"][0]["records"][0]["headers"] == [["h", "1"], ["g", None]]


def test_dump_log_prints_kafkas_index_files(tmp_path: Path) -> None:
    from storage.log import Log, LogConfig

    log = Log.open(tmp_path / "t-0", "t", 0, LogConfig(), log_start_offset=0, recovery_point=0)
    for i in range(4):
        log.append_as_leader(build_simple_batch([b"x" * 100] * 150, base_timestamp=1_000 + i), leader_epoch=1)
    log.close()
    index = CliRunner().invoke(dump_log, [str(tmp_path / "t-0" / "00000000000000000000.index")])
    assert index.exit_code == 0, index.output
    assert "offset: 299 position: 16497" in index.output.splitlines()
    times = CliRunner().invoke(dump_log, [str(tmp_path / "t-0" / "00000000000000000000.timeindex")])
    assert "timestamp: 1001 offset: 299" in times.output.splitlines()


def test_dump_log_takes_kafkas_files_option_comma_separated(tmp_path: Path) -> None:
    # kafka-dump-log.sh --files a.log,b.index: every file in turn, segments and index files alike.
    from storage.log import Log, LogConfig

    segment = _segment(tmp_path)
    log = Log.open(tmp_path / "u-0", "u", 0, LogConfig(), log_start_offset=0, recovery_point=0)
    for i in range(4):
        log.append_as_leader(build_simple_batch([b"x" * 100] * 150, base_timestamp=1_000 + i), leader_epoch=1)
    log.close()
    index = tmp_path / "u-0" / "00000000000000000000.index"
    result = CliRunner().invoke(dump_log, ["--files", f"{segment},{index}"])
    assert result.exit_code == 0, result.output
    dumped = [line for line in result.output.splitlines() if line.startswith("Dumping ")]
    assert dumped == [f"Dumping {segment}", f"Dumping {index}"]
    assert sum(line.startswith("baseOffset: ") for line in result.output.splitlines()) == 2
    assert "offset: 299 position: 16497" in result.output.splitlines()
    # With a positional PATH too: the paths first, then --files; -o json has one document per file.
    both = CliRunner().invoke(dump_log, ["--files", str(segment), str(index), "-o", "json"])
    data = json.loads(both.output)
    assert [d["file"] for d in data] == [str(index), str(segment)]
    # Nothing named: a usage error (exit 2), as kafka-dump-log.sh without --files.
    none = CliRunner().invoke(dump_log, [])
    assert none.exit_code == 2 and "--files" in none.output
    # A missing file among them is named.
    missing = CliRunner().invoke(dump_log, ["--files", f"{segment},{tmp_path / 'nope.log'}"])
    assert missing.exit_code == 1 and "nope.log does not exist" in missing.output
