"""A local cluster of real processes under one root (docs/layout.md): its layout and configs, starting and
stopping its controller and brokers, waiting until it is healthy, and the faults done to its processes.
``isrsim cluster``, ``broker`` and ``controller`` commands, the demo, the scenarios and chaos use it."""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from broker import read_journal
from kit.cluster_files import CONTROLLER_ID, ClusterError, ClusterInfo, ProcessEntry, write_properties
from kit.controller_quorum import ask_controller_sync
from kit.fault_journal import append_fault
from kit.health import wait_healthy
from kit.ports import free_ports
from kit.processes import (
    isrsim_command,
    launch,
    process_state,
    send_signal,
    stop_process,
    wait_exit,
    wait_started,
)
from protocol import CLUSTER_FILE, EVENTS_FILE, ApiKeys

# How long `cluster down`, a restart and the lab's runs give a node to stop cleanly before SIGKILL.
STOP_TIMEOUT_S = 30.0
# How long `cluster down` waits for an active controller before stopping a broker without one.
DOWN_CONTROLLER_WAIT_S = 5.0


def start_controller(info: ClusterInfo, entry: ProcessEntry | None = None) -> None:
    """Starts one controller of the cluster (the first, by default; detached: it outlives this program) and
    waits until it serves."""
    start_controllers(info, [entry or info.controller])


def start_controllers(info: ClusterInfo, entries: list[ProcessEntry] | None = None) -> None:
    """Starts the given controllers (all of them, by default) at once and waits until each serves (a voter
    serves before the quorum has a leader: :func:`kit.health.wait_healthy` waits for that)."""
    entries = list(info.controllers) if entries is None else entries
    for c in entries:
        _write_controller_config(info, c)
    _launch_and_wait(
        "controller", entries, lambda c: f"controller {c.id}" if info.quorum else "the controller"
    )


def _launch_and_wait(kind: str, entries: list[ProcessEntry], what: Callable[[ProcessEntry], str]) -> None:
    """Launches ``isrsim KIND start`` for every entry at once (their start-ups overlap), then waits until
    each journals ``KIND_started`` and pins the port it got into its config."""
    procs = []
    for e in entries:
        proc = launch(isrsim_command(kind, "start", "--config", e.config), Path(e.log))
        e.pid = proc.pid  # known at once: a failure of another start stops this one too
        procs.append((e, proc))
    for e, proc in procs:
        started = wait_started(proc, Path(e.journal), f"{kind}_started", what(e), Path(e.log))
        e.pid, e.host, e.port = proc.pid, started["host"], int(started["port"])
        _pin_port(Path(e.config), e.port)


def _write_controller_config(info: ClusterInfo, c: ProcessEntry) -> None:
    """A voter of a quorum is told every voter's address (fixed when the cluster was made)."""
    if not info.quorum:
        return
    path = Path(c.config)
    lines = path.read_text(encoding="utf-8").splitlines()
    voters = f"controller.quorum.voters={info.quorum_voters}"
    lines = [voters if line.startswith("controller.quorum.voters=") else line for line in lines]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def start_broker(info: ClusterInfo, b: ProcessEntry) -> None:
    """Starts one broker of the cluster (detached) on its config and data, and waits until it serves."""
    start_brokers(info, [b])


def start_brokers(info: ClusterInfo, entries: list[ProcessEntry] | None = None) -> None:
    """Starts the given brokers (all of them, by default) at once, detached, each on its config and data,
    and waits until each serves (starting them one after another cost a few seconds each)."""
    entries = list(info.brokers) if entries is None else entries
    for b in entries:
        _write_broker_config(info, b)
    _launch_and_wait("broker", entries, lambda b: f"broker {b.id}")


def _pin_port(config: Path, port: int) -> None:
    """An OS-assigned port (0) is written back into ``listeners``, so a restart keeps the address."""
    lines = config.read_text(encoding="utf-8").splitlines()
    out = [
        f"{line[:-2]}:{port}"  # the listener keeps its name (PLAINTEXT, SASL_SSL ...)
        if line.startswith("listeners=") and line.endswith(":0")
        else line
        for line in lines
    ]
    if out != lines:
        config.write_text("\n".join(out) + "\n", encoding="utf-8")


def _write_broker_config(info: ClusterInfo, b: ProcessEntry) -> None:
    """Refreshes the controller address in a broker's config (it changes when ports are OS-assigned)."""
    path = Path(b.config)
    lines = path.read_text(encoding="utf-8").splitlines()
    voters = f"controller.quorum.voters={info.quorum_voters}"
    lines = [voters if line.startswith("controller.quorum.voters=") else line for line in lines]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fresh_cluster(
    root: Path,
    brokers: int,
    overrides: tuple[str, ...],
    *,
    what: str,
    secure: bool = False,
    controllers: int = 1,
) -> ClusterInfo:
    """A new cluster under ``root`` on OS-assigned ports, for a run that owns its root (the demo, a
    scenario): a previous cluster there is stopped and deleted first; a directory that is not a cluster root
    is refused. Returns when the cluster is healthy."""
    if root.exists():
        if not (root / CLUSTER_FILE).exists() and any(root.iterdir()):
            raise ClusterError(f"{root} exists and is not an isrsim {what} root; choose another --data-dir")
        try:
            old = ClusterInfo.load(root)
            for p in [*old.brokers, *old.controllers]:
                stop_process(p.pid, 10)
        except ClusterError:
            pass
        shutil.rmtree(root)
    check_overrides(overrides)
    info = create_layout(root, brokers, 0, overrides, secure=secure, controllers=controllers)
    use_client_properties(root)
    start_controllers(info)
    info.save()
    start_brokers(info)
    info.save()
    wait_healthy(info)
    return info


def use_client_properties(root: Path) -> None:
    """This command's own requests (health checks) authenticate as the root's client.properties says."""
    from kit.client_security import apply_client_security
    from protocol import SecurityConfigError

    try:
        apply_client_security(root)
    except SecurityConfigError as exc:
        raise ClusterError(str(exc)) from None


def create_layout(
    root: Path,
    brokers: int,
    base_port: int,
    overrides: tuple[str, ...],
    *,
    secure: bool = False,
    controllers: int = 1,
) -> ClusterInfo:
    """Writes every process's config under ``root`` (``overrides`` already checked by
    :func:`check_overrides`) and returns the cluster, not yet saved. ``secure``: a CA, certificates, SCRAM
    users and SASL_SSL listeners everywhere, and ``<root>/client.properties`` (kit.security_files).
    ``controllers``: that many voters of a Raft quorum (SPEC §11; one is a quorum of one, which elects
    itself), ids from 1000, each in ``controller-<id>/``, on ports fixed now (every voter and broker is told
    them all in ``controller.quorum.voters``)."""
    from broker import BrokerConfig
    from controller import ControllerConfig

    root = root.resolve()
    setup = None
    protocol = "PLAINTEXT"
    if secure:
        from kit.security_files import SECURE_PROTOCOL, SecureSetup

        setup = SecureSetup.create(root)
        protocol = SECURE_PROTOCOL
    settings = dict(o.split("=", 1) for o in overrides)
    # Every node serves /metrics on a free port of its own, recorded in cluster.json (0 turns them off).
    metrics_off = settings.pop("metrics.port", None) == "0"
    # One call for every port chosen now, so that no two of them are the same.
    chosen = free_ports((0 if metrics_off else brokers + controllers) + (0 if base_port else controllers))
    metrics_ports = [0] * (brokers + controllers) if metrics_off else chosen[: brokers + controllers]
    ports = controller_ports(base_port, controllers, chosen[len(chosen) - controllers :])
    controller_entries = []
    for n in range(controllers):
        cid = CONTROLLER_ID + n
        cdir = root / f"controller-{cid}"
        controller_entries.append(
            ProcessEntry(
                id=cid,
                host="127.0.0.1",
                port=ports[n],
                pid=None,
                dir=str(cdir),
                config=str(cdir / "controller.properties"),
                log=str(cdir / "controller.log"),
                journal=str(cdir / EVENTS_FILE),
                metrics_port=metrics_ports[n],
            )
        )
    voters = ",".join(f"{c.id}@127.0.0.1:{c.port}" for c in controller_entries)
    controller_settings = {k: v for k, v in settings.items() if _for_controller(k)}
    broker_settings = {k: v for k, v in settings.items() if k in BrokerConfig.KEYS}
    assert set(controller_settings) <= set(ControllerConfig.KEYS)
    for controller in controller_entries:
        cdir = Path(controller.dir)
        write_properties(
            Path(controller.config),
            {
                "node.id": controller.id,
                "listeners": f"{protocol}://127.0.0.1:{controller.port}",
                "metadata.log.dir": cdir,
                "metrics.port": controller.metrics_port,
                "controller.quorum.voters": voters,
                **(setup.node_settings(f"controller-{controller.id}", cdir, cdir) if setup else {}),
                **controller_settings,
            },
            apply_with=f"isrsim controller restart {controller.id} --force",
            secret=setup is not None,
        )
    info = ClusterInfo(
        root=str(root),
        cluster_id="isrsim",
        controller=controller_entries[0],
        created_ms=int(time.time() * 1000),
        settings={
            "brokers": brokers,
            "controllers": controllers,
            # The controllers are the voters of a quorum, one voter included (a root made before that ran
            # one controller alone in controller/: ClusterInfo.quorum).
            "quorum": True,
            "base_port": base_port,
            "overrides": settings,
        },
        controllers=controller_entries,
    )
    if setup is not None:
        info.settings["secure"] = True
        info.settings["security_protocol"] = protocol
        info.settings["client_config"] = str(setup.write_client_properties())
    for i in range(1, brokers + 1):
        bdir = root / f"broker-{i}"
        port = 0 if base_port == 0 else base_port + i - 1
        entry = ProcessEntry(
            id=i,
            host="127.0.0.1",
            port=port,
            pid=None,
            dir=str(bdir),
            config=str(bdir / "server.properties"),
            log=str(bdir / "broker.log"),
            journal=str(bdir / EVENTS_FILE),
            data_dir=str(bdir / "data"),
            metrics_port=metrics_ports[controllers + i - 1],
        )
        write_properties(
            Path(entry.config),
            {
                "broker.id": i,
                "listeners": f"{protocol}://127.0.0.1:{port}",
                "log.dirs": entry.data_dir,
                "journal.dir": bdir,
                "metrics.port": entry.metrics_port,
                "controller.quorum.voters": voters,
                **(
                    {
                        "inter.broker.listener.name": protocol,
                        **setup.node_settings(f"broker-{i}", bdir, Path(entry.data_dir)),
                    }
                    if setup
                    else {}
                ),
                **broker_settings,
            },
            apply_with=f"isrsim broker restart {i}",
            secret=setup is not None,
        )
        info.brokers.append(entry)
    return info


def controller_ports(base_port: int, controllers: int, free: list[int] | None = None) -> list[int]:
    """The controllers' ports: below the brokers' (base-port-1, base-port-2, ...). With base port 0 free
    ports (``free``, or found here) are chosen now: the voters of a quorum, even a quorum of one, are named
    with their addresses in every voter's and broker's ``controller.quorum.voters`` before any starts."""
    if base_port:
        return [base_port - 1 - n for n in range(controllers)]
    return list(free) if free else free_ports(controllers)


# Keys that matter to the controller too when given with `cluster up --override`.
_CONTROLLER_SHARED_KEYS = {
    "broker.session.timeout.ms",
    "unclean.leader.election.enable",
    "min.insync.replicas",
    "default.replication.factor",
    "num.partitions",
}


# Keys `cluster up` sets itself, per process: an --override of one of them is refused.
_RESERVED_KEYS = {
    "broker.id",
    "node.id",
    "listeners",
    "log.dirs",
    "journal.dir",
    "controller.quorum.voters",
    "metadata.log.dir",
}


def _for_controller(key: str) -> bool:
    """Whether an override goes to the controller: a key only it has, or one it shares with the brokers."""
    from broker import BrokerConfig
    from controller import ControllerConfig

    return key in ControllerConfig.KEYS and (key in _CONTROLLER_SHARED_KEYS or key not in BrokerConfig.KEYS)


def check_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    """Every ``--override`` as key -> value, each key known and each value valid for the processes it goes
    to; a ClusterError names the first problem. Nothing is written before this passes."""
    from broker import BrokerConfig, ConfigError
    from controller import ControllerConfig

    settings: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ClusterError(f"--override {item!r}: expected key=value")
        settings[key.strip()] = value.strip()
    reserved = sorted(set(settings) & _RESERVED_KEYS)
    if reserved:
        raise ClusterError(
            f"--override {reserved[0]}: `cluster up` sets it for each process itself "
            "(use --base-port for ports and --data-dir for directories)"
        )
    unknown = sorted(k for k in settings if k not in BrokerConfig.KEYS and k not in ControllerConfig.KEYS)
    if unknown:
        import difflib

        known = [*BrokerConfig.KEYS, *ControllerConfig.KEYS]
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ClusterError(
            f"--override {unknown[0]}: unknown configuration key{hint}; docs/cli.md lists the keys"
        )
    broker_items = [f"{k}={v}" for k, v in settings.items() if k in BrokerConfig.KEYS]
    controller_items = [f"{k}={v}" for k, v in settings.items() if _for_controller(k)]
    try:
        BrokerConfig.load(None, [*broker_items, "broker.id=1"], environ={})
        ControllerConfig.load(None, controller_items, environ={})
    except ConfigError as exc:
        raise ClusterError(f"--override {exc}") from None
    return settings


def check_ports(ports: list[tuple[int, str]]) -> None:
    """Every fixed port (0 = OS-assigned) is free; else a ClusterError names it and what holds it."""
    from kit.ports import describe_busy, port_free

    busy = [describe_busy(port, what) for port, what in ports if port and not port_free(port)]
    if busy:
        raise ClusterError(
            "; ".join(busy) + ": stop what holds it, or choose another --base-port (0 lets the OS pick)"
        )


def check_same_settings(
    info: ClusterInfo,
    given: set[str],
    brokers: int,
    base_port: int,
    settings: dict[str, str],
    data_dir: Path,
    controllers: int | None = None,
) -> None:
    """An existing root starts as it was made: options that would change it are refused."""
    had = info.settings
    changed: list[str] = []
    if "brokers" in given and brokers != had.get("brokers", len(info.brokers)):
        changed.append(f"--brokers {brokers} (it has {len(info.brokers)})")
    if "controllers" in given and controllers != len(info.controllers):
        changed.append(f"--controllers {controllers} (it has {len(info.controllers)})")
    if "base_port" in given and base_port != had.get("base_port"):
        changed.append(f"--base-port {base_port} (it was made with {had.get('base_port', 'another')})")
    if "overrides" in given and settings != had.get("overrides"):
        before = " ".join(f"{k}={v}" for k, v in (had.get("overrides") or {}).items()) or "none"
        changed.append(f"--override {' '.join(f'{k}={v}' for k, v in settings.items())} (it has {before})")
    if changed:
        raise ClusterError(
            f"the cluster at {data_dir} was made with other settings: {'; '.join(changed)}. "
            f"Run `isrsim cluster up --data-dir {data_dir}` without them to start it as it is, or add "
            "--reset to delete it (data included) and make a new one"
        )


def _leaders_without_standby(
    meta: dict[str, Any] | None, broker_id: int, staying: set[int]
) -> list[str] | None:
    """Partitions ``broker_id`` leads that no other broker in ``staying`` can take over (none in their ISR):
    a controlled shutdown cannot move them. None if the controller's metadata is unknown."""
    if meta is None:
        return None
    out: list[str] = []
    for t in meta.get("topics", []):
        for p in t.get("partitions", []):
            if p["leader_id"] == broker_id and not (set(p["isr_nodes"]) & (staying - {broker_id})):
                out.append(f"{t['name']}-{p['partition_index']}")
    return out


def _stopped_event(b: ProcessEntry, seen: int) -> dict[str, Any] | None:
    stopped = read_journal(Path(b.journal), "broker_stopped")
    return stopped[-1] if len(stopped) > seen else None


def stop_broker_for_down(
    info: ClusterInfo, b: ProcessEntry, staying: set[int], say: Callable[[str], object] | None = None
) -> None:
    """Stops one broker of a cluster going down: with a controlled shutdown when the leaderships it holds
    can move to a broker that stays up, else without (SIGUSR1: it could only time out). Says what
    happened to ``say``, as the broker's journal tells it."""
    say = say or (lambda _msg: None)
    state = process_state(b.pid)
    if state == "stopped":
        say(f"broker {b.id}: not running")
        b.pid = None
        return
    if state == "paused":
        send_signal(b.pid, signal.SIGCONT)
    meta = None
    if any(process_state(c.pid) == "running" for c in info.controllers):
        meta = ask_controller_sync(info, ApiKeys.METADATA, {"topics": None}, wait_s=DOWN_CONTROLLER_WAIT_S)
    stuck = _leaders_without_standby(meta, b.id, staying)
    seen = len(read_journal(Path(b.journal), "broker_stopped"))
    t0 = time.monotonic()
    if stuck is None:
        say(f"broker {b.id}: the controller does not answer; stopping without a controlled shutdown")
        sig = signal.SIGUSR1
    elif stuck:
        shown = ", ".join(stuck[:5]) + (f" and {len(stuck) - 5} more" if len(stuck) > 5 else "")
        say(f"broker {b.id}: skipping the controlled shutdown: no broker that stays up can lead {shown}")
        sig = signal.SIGUSR1
    else:
        say(f"broker {b.id}: controlled shutdown (its leaderships move to brokers still up)")
        sig = signal.SIGTERM
    send_signal(b.pid, sig)
    if wait_exit(b.pid, STOP_TIMEOUT_S):
        event = _stopped_event(b, seen)
        how = (event or {}).get("controlled_shutdown")
        if event is None:
            result = "exited without a clean stop (see its broker.log)"
        elif how == "incomplete":
            result = "stopped, but its controlled shutdown did not complete (see its broker.log)"
        elif how == "completed":
            result = "stopped cleanly after its controlled shutdown"
        else:
            result = "stopped cleanly"
        say(f"broker {b.id}: {result} in {time.monotonic() - t0:.1f}s")
    else:
        send_signal(b.pid, signal.SIGKILL)
        wait_exit(b.pid, 5)
        say(f"broker {b.id}: killed (SIGKILL) after {STOP_TIMEOUT_S:.0f}s without stopping")
    b.pid = None
    info.save()


def stop_brokers(info: ClusterInfo, say: Callable[[str], object] | None = None) -> None:
    """Stops every broker, one at a time: each moves its leaderships to the brokers still up (a
    controlled shutdown) while that can succeed; the last ones, whose partitions have nowhere to go,
    stop without one instead of retrying until controlled.shutdown.timeout.ms."""
    staying = {b.id for b in info.brokers if process_state(b.pid) != "stopped"}
    for b in info.brokers:
        stop_broker_for_down(info, b, staying, say)
        staying.discard(b.id)
    info.save()


def stop_controllers(info: ClusterInfo, say: Callable[[str], object] | None = None) -> None:
    """Stops every controller cleanly (SIGTERM; a quorum's leader resigns with END_QUORUM_EPOCH), all at
    once, then SIGKILL to any still running after the stop timeout."""
    say = say or (lambda _msg: None)
    running = [c for c in info.controllers if process_state(c.pid) != "stopped"]
    for c in running:
        if process_state(c.pid) == "paused":
            send_signal(c.pid, signal.SIGCONT)
        send_signal(c.pid, signal.SIGTERM)
    for c in info.controllers:
        name = f"controller {c.id}" if info.quorum else "controller"
        if c not in running:
            say(f"{name}: not running")
        elif wait_exit(c.pid, STOP_TIMEOUT_S):
            say(f"{name}: stopped cleanly")
        else:
            send_signal(c.pid, signal.SIGKILL)
            wait_exit(c.pid, 5)
            say(f"{name}: killed after {STOP_TIMEOUT_S:.0f}s")
        c.pid = None
    info.save()


def kill_cluster(info: ClusterInfo) -> None:
    """SIGKILL to every process of the cluster at once, then waits for each to go (for a run whose data
    nobody reads afterwards: stopping each cleanly in turn costs seconds)."""
    pids = [p.pid for p in [*info.brokers, *info.controllers] if process_state(p.pid) != "stopped"]
    for pid in pids:
        send_signal(pid, signal.SIGKILL)
    for pid in pids:
        wait_exit(pid, 5)


def record_fault(info: ClusterInfo, action: str, node: str, **params: Any) -> None:
    """A process fault goes into <root>/faults.jsonl (docs/faults.md), as network faults do."""
    append_fault(Path(info.root), action, [node], params)


def heal_restarted(info: ClusterInfo, node: str) -> int:
    """A restarted node starts with no network faults; heal its links on the other nodes too, so no
    fault is left half in force. Returns how many directed links were healed."""
    from kit.net_faults import NetError, change_faults, cluster_from_info

    try:
        change = trio.run(lambda: change_faults(cluster_from_info(info), lambda s: s.heal(node), required=[]))
    except NetError:
        return 0
    return len(change.before) - len(change.after)
