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
from kit.fault_journal import append_fault
from kit.health import wait_healthy
from kit.node_query import ask_sync
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
from protocol import ApiKeys

# How long `cluster down`, a restart and the lab's runs give a node to stop cleanly before SIGKILL.
STOP_TIMEOUT_S = 30.0


def start_controller(info: ClusterInfo) -> None:
    """Starts the cluster's controller (detached: it outlives this program) and waits until it serves."""
    c = info.controller
    proc = launch(isrsim_command("controller", "start", "--config", c.config), Path(c.log))
    started = wait_started(proc, Path(c.journal), "controller_started", "the controller", Path(c.log))
    c.pid, c.host, c.port = proc.pid, started["host"], int(started["port"])
    _pin_port(Path(c.config), c.port)


def start_broker(info: ClusterInfo, b: ProcessEntry) -> None:
    """Starts one broker of the cluster (detached) on its config and data, and waits until it serves."""
    _write_broker_config(info, b)
    proc = launch(isrsim_command("broker", "start", "--config", b.config), Path(b.log))
    started = wait_started(proc, Path(b.journal), "broker_started", f"broker {b.id}", Path(b.log))
    b.pid, b.host, b.port = proc.pid, started["host"], int(started["port"])
    _pin_port(Path(b.config), b.port)


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
    voters = f"controller.quorum.voters={info.controller.id}@{info.controller.host}:{info.controller.port}"
    lines = [voters if line.startswith("controller.quorum.voters=") else line for line in lines]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def fresh_cluster(
    root: Path, brokers: int, overrides: tuple[str, ...], *, what: str, secure: bool = False
) -> ClusterInfo:
    """A new cluster under ``root`` on OS-assigned ports, for a run that owns its root (the demo, a
    scenario): a previous cluster there is stopped and deleted first; a directory that is not a cluster root
    is refused. Returns when the cluster is healthy."""
    if root.exists():
        if not (root / "cluster.json").exists() and any(root.iterdir()):
            raise ClusterError(f"{root} exists and is not an isrsim {what} root; choose another --data-dir")
        try:
            old = ClusterInfo.load(root)
            for p in [*old.brokers, old.controller]:
                stop_process(p.pid, 10)
        except ClusterError:
            pass
        shutil.rmtree(root)
    check_overrides(overrides)
    info = create_layout(root, brokers, 0, overrides, secure=secure)
    use_client_properties(root)
    start_controller(info)
    info.save()
    for b in info.brokers:
        start_broker(info, b)
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
    root: Path, brokers: int, base_port: int, overrides: tuple[str, ...], *, secure: bool = False
) -> ClusterInfo:
    """Writes every process's config under ``root`` (``overrides`` already checked by
    :func:`check_overrides`) and returns the cluster, not yet saved. ``secure``: a CA, certificates, SCRAM
    users and SASL_SSL listeners everywhere, and ``<root>/client.properties`` (kit.security_files)."""
    from broker import BrokerConfig, ControllerConfig

    root = root.resolve()
    setup = None
    protocol = "PLAINTEXT"
    if secure:
        from kit.security_files import SECURE_PROTOCOL, SecureSetup

        setup = SecureSetup.create(root)
        protocol = SECURE_PROTOCOL
    cdir = root / "controller"
    controller_port = 0 if base_port == 0 else base_port - 1
    controller = ProcessEntry(
        id=CONTROLLER_ID,
        host="127.0.0.1",
        port=controller_port,
        pid=None,
        dir=str(cdir),
        config=str(cdir / "controller.properties"),
        log=str(cdir / "controller.log"),
        journal=str(cdir / "events.jsonl"),
    )
    settings = dict(o.split("=", 1) for o in overrides)
    # Every node serves /metrics on a free port of its own, recorded in cluster.json (0 turns them off).
    metrics_off = settings.pop("metrics.port", None) == "0"
    metrics_ports = [0] * (brokers + 1) if metrics_off else free_ports(brokers + 1)
    controller.metrics_port = metrics_ports[0]
    controller_settings = {k: v for k, v in settings.items() if _for_controller(k)}
    broker_settings = {k: v for k, v in settings.items() if k in BrokerConfig.KEYS}
    assert set(controller_settings) <= set(ControllerConfig.KEYS)
    write_properties(
        Path(controller.config),
        {
            "node.id": CONTROLLER_ID,
            "listeners": f"{protocol}://127.0.0.1:{controller_port}",
            "metadata.log.dir": cdir,
            "metrics.port": controller.metrics_port,
            **(setup.node_settings("controller", cdir, cdir) if setup else {}),
            **controller_settings,
        },
        secret=setup is not None,
    )
    info = ClusterInfo(
        root=str(root),
        cluster_id="isrsim",
        controller=controller,
        created_ms=int(time.time() * 1000),
        settings={"brokers": brokers, "base_port": base_port, "overrides": settings},
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
            journal=str(bdir / "events.jsonl"),
            data_dir=str(bdir / "data"),
            metrics_port=metrics_ports[i],
        )
        write_properties(
            Path(entry.config),
            {
                "broker.id": i,
                "listeners": f"{protocol}://127.0.0.1:{port}",
                "log.dirs": entry.data_dir,
                "journal.dir": bdir,
                "metrics.port": entry.metrics_port,
                "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_port}",
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
            secret=setup is not None,
        )
        info.brokers.append(entry)
    return info


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
    from broker import BrokerConfig, ControllerConfig

    return key in ControllerConfig.KEYS and (key in _CONTROLLER_SHARED_KEYS or key not in BrokerConfig.KEYS)


def check_overrides(overrides: tuple[str, ...]) -> dict[str, str]:
    """Every ``--override`` as key -> value, each key known and each value valid for the processes it goes
    to; a ClusterError names the first problem. Nothing is written before this passes."""
    from broker import BrokerConfig, ConfigError, ControllerConfig

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
) -> None:
    """An existing root starts as it was made: options that would change it are refused."""
    had = info.settings
    changed: list[str] = []
    if "brokers" in given and brokers != had.get("brokers", len(info.brokers)):
        changed.append(f"--brokers {brokers} (it has {len(info.brokers)})")
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
    if process_state(info.controller.pid) == "running":
        meta = ask_sync(info.controller, ApiKeys.METADATA, {"topics": None})
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


def kill_cluster(info: ClusterInfo) -> None:
    """SIGKILL to every process of the cluster at once, then waits for each to go (for a run whose data
    nobody reads afterwards: stopping each cleanly in turn costs seconds)."""
    pids = [p.pid for p in [*info.brokers, info.controller] if process_state(p.pid) != "stopped"]
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
