"""A cluster root on disk (docs/storage.md): ``cluster.json``, ``controller-<id>/`` (each voter of the
controller quorum; ``controller/`` in a root made before one-voter quorums), ``broker-<id>/``, ``workload/``,
and the properties files written there. (Its processes are started and signalled by
:mod:`kit.processes`.)"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import ClusterError

CLUSTER_FILE = "cluster.json"
CONTROLLER_ID = 1000


@dataclass
class ProcessEntry:
    id: int
    host: str
    port: int
    pid: int | None
    dir: str
    config: str
    log: str
    journal: str
    data_dir: str = ""
    # The Prometheus /metrics port (`metrics.port`), 0 when off (docs/metrics.md).
    metrics_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else None


@dataclass
class ClusterInfo:
    root: str
    cluster_id: str
    # The first controller (the only one of a one-voter quorum): what code that predates the quorum reads.
    controller: ProcessEntry
    brokers: list[ProcessEntry] = field(default_factory=list)
    created_ms: int = 0
    # What `cluster up` was given when it made the root: brokers, controllers, base_port, overrides.
    settings: dict[str, Any] = field(default_factory=dict)
    # Every controller process (ids from 1000); several are the voters of a quorum (SPEC §11). The first is
    # ``controller`` itself (the same object, so a pid set on one is set on the other).
    controllers: list[ProcessEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.controllers:
            self.controllers = [self.controller]
        self.controller = self.controllers[0]

    @property
    def quorum(self) -> bool:
        """Whether the controllers are the voters of a Raft quorum (SPEC §11): every cluster `cluster up`
        makes, a single controller included (a quorum of one voter, which elects itself). Only a root made
        before one-voter quorums (one controller in ``controller/``, its state in ``cluster-metadata.json``)
        runs its controller alone."""
        return len(self.controllers) > 1 or bool(self.settings.get("quorum"))

    @property
    def several_voters(self) -> bool:
        """Whether there is more than one controller. Network faults name each controller by its id only
        then (a node that knows one voter names it ``controller``, as protocol.faults does)."""
        return len(self.controllers) > 1

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters`` as brokers and voters are told it: ``id@host:port,...``."""
        return ",".join(f"{c.id}@{c.host}:{c.port}" for c in self.controllers)

    def controller_by_id(self, controller_id: int) -> ProcessEntry:
        for c in self.controllers:
            if c.id == controller_id:
                return c
        known = ", ".join(str(c.id) for c in self.controllers)
        raise ClusterError(f"no controller {controller_id} in this cluster (controllers: {known})")

    def node_name(self, entry: ProcessEntry) -> str:
        """How faults.jsonl and the network faults name a node: a broker's id, ``controller`` for a single
        controller, a voter's id for each controller of a quorum."""
        if entry in self.brokers:
            return str(entry.id)
        return str(entry.id) if self.several_voters else "controller"

    def broker(self, broker_id: int) -> ProcessEntry:
        for b in self.brokers:
            if b.id == broker_id:
                return b
        known = ", ".join(str(b.id) for b in self.brokers)
        raise ClusterError(f"no broker {broker_id} in this cluster (brokers: {known})")

    def save(self) -> None:
        path = Path(self.root) / CLUSTER_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, root: Path) -> ClusterInfo:
        path = root / CLUSTER_FILE
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster at {root} ({path} does not exist); "
                f"start one with `isrsim cluster up --data-dir {root}`"
            ) from None
        except ValueError as exc:
            raise ClusterError(
                f"{path} is not valid JSON ({exc}); remove the directory and run cluster up"
            ) from None
        controllers = [ProcessEntry(**c) for c in raw.get("controllers") or [raw["controller"]]]
        return cls(
            root=raw["root"],
            cluster_id=raw["cluster_id"],
            controller=controllers[0],
            brokers=[ProcessEntry(**b) for b in raw["brokers"]],
            created_ms=raw.get("created_ms", 0),
            settings=raw.get("settings", {}),
            controllers=controllers,
        )


def write_properties(path: Path, values: dict[str, Any], *, apply_with: str, secret: bool = False) -> None:
    """A properties file; ``apply_with``: the command that restarts its process (named in its first line);
    ``secret`` (it holds a password): created with mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# written by `isrsim cluster up`; edit and `{apply_with}` to apply"]
    lines += [f"{k}={v}" for k, v in values.items()]
    text = "\n".join(lines) + "\n"
    if secret:
        from broker import write_secret_file

        write_secret_file(path, text)
        return
    path.write_text(text, encoding="utf-8")
