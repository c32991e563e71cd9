"""Finding a cluster's files on disk (docs/storage.md): brokers' data directories, partition directories,
segments, checkpoints and journals.

Only names and sizes are looked at here (on the driver); the bytes are read by Spark tasks
(:mod:`spark_jobs.sources`). Two shapes of ``root`` are understood:

- a cluster root made by ``isrsim cluster up``: ``broker-<id>/`` (a data directory anywhere below it, found
  by its ``meta.properties``, ``events.jsonl`` and ``acked.jsonl``), ``controller/`` and
  ``workload/acked-*.jsonl``;
- a single broker data directory (it holds ``meta.properties`` itself), with its ``events.jsonl`` and, if
  present, a sibling or nested ``workload/``.

Anything that does not fit is reported as an :class:`InputProblem` naming the path, never raised.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from protocol import ACKED_FILE, ACTIVITY_FILE, EVENTS_FILE, META_PROPERTIES

HW_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

_BROKER_DIR = re.compile(r"^broker-(\d+)$")
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<partition>\d+)$")
_SEGMENT = re.compile(r"^(\d{20})\.log$")
METADATA_LOG_DIR = "__cluster_metadata-0"
_CONTROLLER_DIR = re.compile(r"^controller-(\d+)$")
# meta.properties is looked for this many levels below broker-<id>/.
_MAX_DEPTH = 3


@dataclass(frozen=True, slots=True)
class InputProblem:
    """A file or directory that cannot be read as what it should be."""

    path: str
    problem: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "problem": self.problem}


@dataclass(frozen=True, slots=True)
class SegmentFile:
    broker: int
    topic: str
    partition: int
    path: str
    base_offset: int
    size: int
    is_last: bool


@dataclass(frozen=True, slots=True)
class PartitionDir:
    broker: int
    topic: str
    partition: int
    path: str


@dataclass(frozen=True, slots=True)
class BrokerDir:
    broker: int
    data_dir: str
    partitions: tuple[PartitionDir, ...]


@dataclass
class ClusterLayout:
    root: str
    brokers: list[BrokerDir] = field(default_factory=list)
    segments: list[SegmentFile] = field(default_factory=list)
    broker_journals: list[str] = field(default_factory=list)
    controller_journals: list[str] = field(default_factory=list)
    acked_journals: list[str] = field(default_factory=list)
    broker_acked_journals: list[str] = field(default_factory=list)
    activity_journals: list[str] = field(default_factory=list)
    attempt_journals: list[str] = field(default_factory=list)  # workload/attempts-*.jsonl
    # Each voter's metadata log (``__cluster_metadata-0`` under a controller's directory): ``broker`` is the
    # controller's id, ``topic``/``partition`` are ``__cluster_metadata``/0.
    metadata_segments: list[SegmentFile] = field(default_factory=list)
    controller_ids: list[int] = field(default_factory=list)  # the controllers' (voters') ids, from their dirs
    problems: list[InputProblem] = field(default_factory=list)

    @property
    def segment_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def partition_names(self) -> list[tuple[str, int]]:
        return sorted({(p.topic, p.partition) for b in self.brokers for p in b.partitions})

    def broker_ids(self) -> list[int]:
        return [b.broker for b in self.brokers]


def read_properties(path: Path) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def _find_meta(directory: Path, depth: int = 0) -> list[Path]:
    if (directory / META_PROPERTIES).is_file():
        return [directory]
    if depth >= _MAX_DEPTH:
        return []
    found: list[Path] = []
    try:
        children = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return []
    for child in children:
        found.extend(_find_meta(child, depth + 1))
    return found


def _find_files(directory: Path, name: str, depth: int = 0) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return found
    for entry in entries:
        if entry.is_file() and entry.name == name:
            found.append(entry)
        elif entry.is_dir() and depth < _MAX_DEPTH:
            found.extend(_find_files(entry, name, depth + 1))
    return found


def _broker_id(data_dir: Path, dir_id: int | None, problems: list[InputProblem]) -> int | None:
    meta = data_dir / META_PROPERTIES
    try:
        props = read_properties(meta)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(InputProblem(str(meta), f"cannot read meta.properties: {exc}"))
        return dir_id
    raw = props.get("broker.id") or props.get("node.id")
    if raw is None:
        if dir_id is None:
            problems.append(InputProblem(str(meta), "meta.properties has no broker.id"))
        return dir_id
    try:
        broker = int(raw)
    except ValueError:
        problems.append(InputProblem(str(meta), f"broker.id {raw!r} is not an integer"))
        return dir_id
    if dir_id is not None and broker != dir_id:
        problems.append(InputProblem(str(meta), f"broker.id={broker} but the directory is broker-{dir_id}"))
    return broker


def _scan_data_dir(layout: ClusterLayout, broker: int, data_dir: Path) -> None:
    partitions: list[PartitionDir] = []
    for entry in sorted(data_dir.iterdir()):
        m = _PARTITION_DIR.match(entry.name)
        if not entry.is_dir() or m is None:
            continue
        topic, partition = m.group("topic"), int(m.group("partition"))
        partitions.append(PartitionDir(broker, topic, partition, str(entry)))
        layout.segments.extend(_segment_files(layout, entry, broker, topic, partition, "partition"))
    layout.brokers.append(BrokerDir(broker, str(data_dir), tuple(partitions)))


def _controller_id(controller: Path) -> int | None:
    """A controller directory's node id: ``controller-<id>``, else its ``controller.properties``."""
    m = _CONTROLLER_DIR.match(controller.name)
    if m is not None:
        return int(m.group(1))
    for props in _find_files(controller, "controller.properties"):
        try:
            raw = read_properties(props).get("node.id")
            return int(raw) if raw is not None else None
        except (OSError, UnicodeDecodeError, ValueError):
            continue
    return None


def _find_dirs(directory: Path, name: str, depth: int = 0) -> list[Path]:
    found: list[Path] = []
    try:
        entries = sorted(p for p in directory.iterdir() if p.is_dir())
    except OSError:
        return found
    for entry in entries:
        if entry.name == name:
            found.append(entry)
        elif depth < _MAX_DEPTH:
            found.extend(_find_dirs(entry, name, depth + 1))
    return found


def _scan_metadata_log(layout: ClusterLayout, controller: Path) -> None:
    """The segments of the controller's metadata log (``metadata.log.dir``/__cluster_metadata-0)."""
    voter = _controller_id(controller)
    if voter is None:
        return
    layout.controller_ids.append(voter)
    for log_dir in _find_dirs(controller, METADATA_LOG_DIR)[:1]:
        layout.metadata_segments.extend(
            _segment_files(layout, log_dir, voter, "__cluster_metadata", 0, "metadata log")
        )


def _segment_files(
    layout: ClusterLayout, directory: Path, node: int, topic: str, partition: int, what: str
) -> list[SegmentFile]:
    """The ``.log`` segments of one partition directory in offset order, the last one marked active; what
    cannot be listed or stat'ed is a problem of the layout."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        layout.problems.append(InputProblem(str(directory), f"cannot list {what} directory: {exc}"))
        return []
    segs = sorted((int(m.group(1)), name) for name in names if (m := _SEGMENT.match(name)))
    out: list[SegmentFile] = []
    for i, (base, name) in enumerate(segs):
        path = directory / name
        try:
            size = path.stat().st_size
        except OSError as exc:
            layout.problems.append(InputProblem(str(path), f"cannot stat segment: {exc}"))
            continue
        out.append(SegmentFile(node, topic, partition, str(path), base, size, i == len(segs) - 1))
    return out


def discover(root: str | Path) -> ClusterLayout:
    """Every input file under ``root``. Problems are collected in ``layout.problems``."""
    root_path = Path(root)
    layout = ClusterLayout(root=str(root_path))
    if not root_path.is_dir():
        layout.problems.append(InputProblem(str(root_path), "no such directory"))
        return layout
    seen_journals: set[str] = set()

    def add_journals(paths: list[Path], into: list[str]) -> None:
        for p in paths:
            real = os.path.realpath(p)
            if real not in seen_journals:
                seen_journals.add(real)
                into.append(str(p))

    if (root_path / META_PROPERTIES).is_file():
        broker = _broker_id(root_path, None, layout.problems)
        if broker is not None:
            _scan_data_dir(layout, broker, root_path)
            add_journals(_find_files(root_path, EVENTS_FILE), layout.broker_journals)
            add_journals(_find_files(root_path, ACKED_FILE), layout.broker_acked_journals)
            add_journals(_find_files(root_path, ACTIVITY_FILE), layout.activity_journals)
    else:
        for entry in sorted(root_path.iterdir()):
            m = _BROKER_DIR.match(entry.name)
            if m is None or not entry.is_dir():
                continue
            dir_id = int(m.group(1))
            data_dirs = _find_meta(entry)
            if not data_dirs:
                layout.problems.append(
                    InputProblem(str(entry), f"no {META_PROPERTIES} below it: not a broker data directory")
                )
                continue
            if len(data_dirs) > 1:
                layout.problems.append(
                    InputProblem(str(entry), f"several data directories: {[str(d) for d in data_dirs]}")
                )
            broker = _broker_id(data_dirs[0], dir_id, layout.problems)
            if broker is not None:
                _scan_data_dir(layout, broker, data_dirs[0])
            add_journals(_find_files(entry, EVENTS_FILE), layout.broker_journals)
            add_journals(_find_files(entry, ACKED_FILE), layout.broker_acked_journals)
            add_journals(_find_files(entry, ACTIVITY_FILE), layout.activity_journals)
        # One controller (controller/) or the voters of a quorum (controller-<id>/).
        for controller in [root_path / "controller", *sorted(root_path.glob("controller-*"))]:
            if controller.is_dir():
                add_journals(_find_files(controller, EVENTS_FILE), layout.controller_journals)
                _scan_metadata_log(layout, controller)
    # The workload's journals: workload/, and any workload-<name>/ beside it (the compose report mounts a
    # host producer's journal directory as workload-host/, docs/docker.md).
    for workload in [root_path / "workload", *sorted(root_path.glob("workload-*"))]:
        if workload.is_dir():
            add_journals(sorted(workload.glob("acked-*.jsonl")), layout.acked_journals)
            add_journals(sorted(workload.glob("attempts-*.jsonl")), layout.attempt_journals)
    if not layout.brokers and not layout.problems:
        layout.problems.append(
            InputProblem(
                str(root_path), "no broker-<id>/ directory and no meta.properties: not a cluster root"
            )
        )
    return layout
