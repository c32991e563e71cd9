"""``isrsim cluster up|down|status``, ``isrsim broker kill|restart|pause|resume``, ``isrsim controller
kill|restart``: a local cluster of real processes under one data root."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Any

import click
import trio

from cli.cluster_files import (
    CONTROLLER_ID,
    ClusterError,
    ClusterInfo,
    ProcessEntry,
    free_ports,
    journal_events,
    process_state,
    send_signal,
    spawn,
    stop_process,
    wait_exit,
    wait_started,
    write_properties,
)
from cli.fault_journal import append_fault
from cli.node_query import ask_sync
from cli.output import OUTPUT_OPTION, echo_json
from protocol import ApiKeys

DEFAULT_ROOT = Path("isrsim-data")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


def root_option(f: Any) -> Any:
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_ROOT,
        show_default=True,
        envvar="ISRSIM_DATA_DIR",
        help="The cluster root (cluster.json, controller/, broker-<id>/, workload/); or $ISRSIM_DATA_DIR.",
    )(f)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


# ---------------------------------------------------------------------------------------------- starting


def start_controller(info: ClusterInfo) -> None:
    c = info.controller
    seen = len(journal_events(Path(c.journal), "controller_started"))
    proc = spawn(["controller", "start", "--config", c.config], Path(c.log))
    started = wait_started(
        proc, Path(c.journal), "controller_started", seen, "the controller", Path(c.log), START_TIMEOUT_S
    )
    c.pid, c.host, c.port = proc.pid, started["host"], int(started["port"])
    _pin_port(Path(c.config), c.port)


def start_broker(info: ClusterInfo, b: ProcessEntry) -> None:
    seen = len(journal_events(Path(b.journal), "broker_started"))
    _write_broker_config(info, b)
    proc = spawn(["broker", "start", "--config", b.config], Path(b.log))
    started = wait_started(
        proc, Path(b.journal), "broker_started", seen, f"broker {b.id}", Path(b.log), START_TIMEOUT_S
    )
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


def wait_healthy(info: ClusterInfo, timeout: float = START_TIMEOUT_S) -> None:
    """Every broker registered and unfenced, and every partition with a leader."""
    deadline = time.monotonic() + timeout
    problem = "no answer from the controller"
    wanted = {b.id for b in info.brokers if process_state(b.pid) == "running"}
    while time.monotonic() < deadline:
        cluster = ask_sync(info.controller, ApiKeys.DESCRIBE_CLUSTER, {})
        meta = ask_sync(info.controller, ApiKeys.METADATA, {"topics": None})
        if cluster is not None and meta is not None:
            live = {b["broker_id"] for b in cluster.get("brokers", []) if not b.get("fenced")}
            leaderless = [
                f"{t['name']}-{p['partition_index']}"
                for t in meta.get("topics", [])
                for p in t.get("partitions", [])
                if p["leader_id"] < 0
            ]
            if wanted <= live and not leaderless:
                return
            problem = (
                f"brokers not yet registered: {sorted(wanted - live)}"
                if not wanted <= live
                else (f"partitions without a leader: {', '.join(leaderless[:10])}")
            )
        time.sleep(0.1)
    raise ClusterError(f"the cluster did not become healthy within {timeout:.0f}s: {problem}")


def fresh_cluster(
    root: Path, brokers: int, overrides: tuple[str, ...], *, what: str, secure: bool = False
) -> ClusterInfo:
    """A new cluster under ``root`` on OS-assigned ports, for a run that owns its root (the demo, a
    scenario): a previous cluster there is stopped and deleted first; a directory that is not a cluster root
    is refused. Returns when the cluster is healthy."""
    from cli.cluster_files import stop_process

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
    _use_client_properties(root)
    start_controller(info)
    info.save()
    for b in info.brokers:
        start_broker(info, b)
        info.save()
    wait_healthy(info)
    return info


def _use_client_properties(root: Path) -> None:
    """This command's own requests (health checks) authenticate as the root's client.properties says."""
    from cli.client_auth import apply_client_security

    apply_client_security(root)


def create_layout(
    root: Path, brokers: int, base_port: int, overrides: tuple[str, ...], *, secure: bool = False
) -> ClusterInfo:
    """Writes every process's config under ``root`` (``overrides`` already checked by
    :func:`check_overrides`) and returns the cluster, not yet saved. ``secure``: a CA, certificates, SCRAM
    users and SASL_SSL listeners everywhere, and ``<root>/client.properties`` (cli.security_files)."""
    from broker import BrokerConfig, ControllerConfig

    root = root.resolve()
    setup = None
    protocol = "PLAINTEXT"
    if secure:
        from cli.security_files import SECURE_PROTOCOL, SecureSetup

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
    from cli.ports import describe_busy, port_free

    busy = [describe_busy(port, what) for port, what in ports if port and not port_free(port)]
    if busy:
        raise ClusterError(
            "; ".join(busy) + ": stop what holds it, or choose another --base-port (0 lets the OS pick)"
        )


# ---------------------------------------------------------------------------------------------- commands


@click.group()
def cluster() -> None:
    """Bring a local cluster (a controller and N brokers) up and down, and watch it."""


@cluster.command("up")
@click.option("--brokers", type=click.IntRange(1, 50), default=3, show_default=True)
@root_option
@click.option(
    "--base-port",
    type=click.IntRange(0, 65000),
    default=9092,
    show_default=True,
    help="Broker N listens on base-port+N-1, the controller on base-port-1; 0 lets the OS pick every port.",
)
@click.option(
    "--override", "overrides", multiple=True, help="key=value for every broker (e.g. min.insync.replicas=2)."
)
@click.option(
    "--reset",
    is_flag=True,
    help="Delete an existing (stopped) cluster at --data-dir, its data included, and make a new one.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="SASL_SSL everywhere: a CA and certificates, SCRAM users admin and broker, the authorizer on, "
    "and <data-dir>/client.properties for clients (docs/security.md).",
)
@click.pass_context
def cluster_up(
    ctx: click.Context,
    brokers: int,
    data_dir: Path,
    base_port: int,
    overrides: tuple[str, ...],
    reset: bool,
    secure: bool,
) -> None:
    """Start a controller and N brokers as background processes; return when the cluster is healthy.

    Run again on a stopped cluster's root to start the same cluster (same ids, data and config); options
    that differ from those it was made with are refused unless --reset. All or nothing: every --override
    is checked before anything is written, and if a process fails to start, those started are stopped (and
    a root made by this command is removed).
    """
    from broker import BrokerConfig, ControllerConfig
    from cli.config_check import warn_unknown

    # The processes inherit this environment: a misspelt ISRSIM_ variable is said here, not only in a log.
    warn_unknown("cluster up", [], [*BrokerConfig.KEYS, *BrokerConfig.ALIASES, *ControllerConfig.KEYS])
    try:
        settings = check_overrides(overrides)
        info, made = _prepare(ctx, data_dir, brokers, base_port, settings, reset, secure)
    except ClusterError as exc:
        raise _fail(exc) from None
    _use_client_properties(Path(info.root))
    try:
        start_controller(info)
        info.save()
        click.echo(
            f"controller {info.controller.id} on {info.controller.address} (pid {info.controller.pid})"
        )
        for b in info.brokers:
            start_broker(info, b)
            info.save()
            click.echo(f"broker {b.id} on {b.address} (pid {b.pid})")
        wait_healthy(info)
    except BaseException as exc:
        _undo_up(info, made)
        if isinstance(exc, ClusterError):
            raise _fail(exc) from None
        raise
    click.echo(
        f"cluster is up: {len(info.brokers)} brokers. Data, journals and process logs under {info.root}"
    )
    if info.settings.get("secure"):
        click.echo(
            f"secure: every listener is {info.settings.get('security_protocol')}; clients authenticate as "
            f"admin from {info.settings.get('client_config')} (mode 0600)"
        )
    where = "" if _is_default_root(data_dir) else f" --data-dir {data_dir}"
    click.echo(
        f"next: isrsim topic create t --partitions 6 --replication-factor 3{where}; "
        f"isrsim cluster status{where}"
    )


def _is_default_root(data_dir: Path) -> bool:
    """Whether a later command finds this root without --data-dir (the default, or $ISRSIM_DATA_DIR)."""
    import os

    default = Path(os.environ.get("ISRSIM_DATA_DIR") or DEFAULT_ROOT)
    return data_dir.resolve() == default.resolve()


def _prepare(
    ctx: click.Context,
    data_dir: Path,
    brokers: int,
    base_port: int,
    settings: dict[str, str],
    reset: bool,
    secure: bool = False,
) -> tuple[ClusterInfo, bool]:
    """The cluster to start, and whether this command makes its root (then a failure removes it)."""
    import shutil

    given = {
        name
        for name in ("brokers", "base_port", "overrides", "secure")
        if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)
    }
    if (data_dir / "cluster.json").exists():
        info = ClusterInfo.load(data_dir)
        running = [p for p in [info.controller, *info.brokers] if process_state(p.pid) != "stopped"]
        if running:
            raise ClusterError(
                f"a cluster is already running at {data_dir} (pids {[p.pid for p in running]}); "
                "`isrsim cluster status` shows it, `isrsim cluster down` stops it"
            )
        if reset:
            shutil.rmtree(data_dir)
        else:
            _check_same_settings(info, given, brokers, base_port, settings, data_dir)
            if "secure" in given and secure != bool(info.settings.get("secure")):
                raise ClusterError(
                    f"the cluster at {data_dir} was made {'without' if secure else 'with'} --secure; run "
                    f"`isrsim cluster up --data-dir {data_dir}` to start it as it is, or add --reset to "
                    "delete it (data included) and make a new one"
                )
            check_ports(
                [(info.controller.port, "the controller")]
                + [(b.port, f"broker {b.id}") for b in info.brokers]
            )
            click.echo(f"starting the existing cluster at {info.root}")
            return info, False
    controller_port = 0 if base_port == 0 else base_port - 1
    check_ports(
        [(controller_port, "the controller")]
        + [(0 if base_port == 0 else base_port + i - 1, f"broker {i}") for i in range(1, brokers + 1)]
    )
    made = not data_dir.exists() or not any(data_dir.iterdir())
    info = create_layout(
        data_dir, brokers, base_port, tuple(f"{k}={v}" for k, v in settings.items()), secure=secure
    )
    return info, made


def _check_same_settings(
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


def _undo_up(info: ClusterInfo, made: bool) -> None:
    """A failed `cluster up` leaves nothing running, and no root it made itself."""
    import shutil

    for entry in [*info.brokers, info.controller]:
        if entry.pid and process_state(entry.pid) != "stopped":
            result = stop_process(entry.pid, 5)
            click.echo(
                f"stopped {'the controller' if entry is info.controller else f'broker {entry.id}'} "
                f"(pid {entry.pid}): {result}",
                err=True,
            )
        entry.pid = None
    if made:
        shutil.rmtree(info.root, ignore_errors=True)
    elif (Path(info.root) / "cluster.json").exists():
        info.save()


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
    stopped = journal_events(Path(b.journal), "broker_stopped")
    return stopped[-1] if len(stopped) > seen else None


def stop_broker_for_down(info: ClusterInfo, b: ProcessEntry, staying: set[int], echo: bool) -> None:
    """Stops one broker of a cluster going down: with a controlled shutdown when the leaderships it holds
    can move to a broker that stays up, else without (SIGUSR1: it could only time out). Says what
    happened, as the broker's journal tells it."""
    say = click.echo if echo else (lambda _msg: None)
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
    seen = len(journal_events(Path(b.journal), "broker_stopped"))
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


def stop_brokers(info: ClusterInfo, echo: bool = True) -> None:
    """Stops every broker, one at a time: each moves its leaderships to the brokers still up (a
    controlled shutdown) while that can succeed; the last ones, whose partitions have nowhere to go,
    stop without one instead of retrying until controlled.shutdown.timeout.ms."""
    staying = {b.id for b in info.brokers if process_state(b.pid) != "stopped"}
    for b in info.brokers:
        stop_broker_for_down(info, b, staying, echo)
        staying.discard(b.id)
    info.save()


@cluster.command("down")
@root_option
def cluster_down(data_dir: Path) -> None:
    """Stop every broker, then the controller. Data is kept.

    Brokers stop one at a time with a controlled shutdown (the controller moves their leaderships to the
    brokers still up) while one can succeed; a broker whose partitions have no other live in-sync replica
    stops without it. Each step and its outcome is printed.
    """
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None
    t0 = time.monotonic()
    stop_brokers(info)
    click.echo(f"controller: {stop_process(info.controller.pid, STOP_TIMEOUT_S)}")
    info.controller.pid = None
    info.save()
    click.echo(f"cluster at {info.root} is down ({time.monotonic() - t0:.1f}s); data kept")


@cluster.command("status")
@root_option
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True)
@click.option("--topic", default=None, help="Only this topic.")
@OUTPUT_OPTION
def cluster_status(data_dir: Path, watch: bool, interval: float, topic: str | None, output: str) -> None:
    """Brokers (alive, paused, fenced), then one row per partition: leader, epoch, replicas, ISR, and each
    replica's LEO, HW and lag."""
    from cli.status_view import gather, render, status_document

    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None
    if output == "json":
        if watch:
            raise click.BadParameter("--watch draws on a terminal; with -o json, run the command again")
        echo_json(status_document(trio.run(gather, info, topic)))
        return
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: do not wrap the offsets column at 80
    if not watch:
        console.print(render(trio.run(gather, info, topic)))
        return
    try:
        with Live(render(trio.run(gather, info, topic)), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                info = ClusterInfo.load(data_dir)
                live.update(render(trio.run(gather, info, topic)))
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------------------------------------- brokers


def record_fault(info: ClusterInfo, action: str, node: str, **params: Any) -> None:
    """A process fault goes into <root>/faults.jsonl (docs/faults.md), as network faults do."""
    append_fault(Path(info.root), action, [node], params)


def heal_restarted(info: ClusterInfo, node: str) -> int:
    """A restarted node starts with no network faults; heal its links on the other nodes too, so no
    fault is left half in force. Returns how many directed links were healed."""
    from cli.net_cmd import NetError, change_faults, cluster_from_info

    try:
        change = trio.run(lambda: change_faults(cluster_from_info(info), lambda s: s.heal(node), required=[]))
    except NetError:
        return 0
    return len(change.before) - len(change.after)


def _load(data_dir: Path) -> ClusterInfo:
    try:
        return ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None


@click.command("kill")
@click.argument("broker_id", type=int)
@click.option("--signal", "sig", type=click.Choice(["TERM", "KILL"]), default="KILL", show_default=True)
@root_option
def broker_kill(broker_id: int, sig: str, data_dir: Path) -> None:
    """Send SIGKILL (crash) or SIGTERM (clean, controlled shutdown) to broker BROKER_ID."""
    info = _load(data_dir)
    try:
        b = info.broker(broker_id)
    except ClusterError as exc:
        raise _fail(exc) from None
    if process_state(b.pid) == "paused" and sig == "TERM":
        send_signal(b.pid, signal.SIGCONT)
    if not send_signal(b.pid, signal.Signals[f"SIG{sig}"]):
        raise click.ClickException(
            f"broker {broker_id} is not running; `isrsim broker restart {broker_id}` starts it"
        )
    record_fault(info, "kill" if sig == "KILL" else "term", str(broker_id), signal=sig, pid=b.pid)
    click.echo(f"sent SIG{sig} to broker {broker_id} (pid {b.pid})")


@click.command("restart")
@click.argument("broker_id", type=int)
@root_option
def broker_restart(broker_id: int, data_dir: Path) -> None:
    """Stop broker BROKER_ID if it runs (cleanly), then start it again on its data."""
    info = _load(data_dir)
    try:
        b = info.broker(broker_id)
        if process_state(b.pid) != "stopped":
            click.echo(f"broker {broker_id}: {stop_process(b.pid, STOP_TIMEOUT_S)}")
        start_broker(info, b)
        info.save()
    except ClusterError as exc:
        raise _fail(exc) from None
    healed = heal_restarted(info, str(b.id))
    record_fault(info, "restart", str(b.id), pid=b.pid, healed_links=healed)
    click.echo(f"broker {b.id} restarted on {b.address} (pid {b.pid})")


def _pause_resume(broker_id: int, data_dir: Path, sig: signal.Signals, verb: str) -> None:
    info = _load(data_dir)
    try:
        b = info.broker(broker_id)
    except ClusterError as exc:
        raise _fail(exc) from None
    if not send_signal(b.pid, sig):
        raise click.ClickException(f"broker {broker_id} is not running")
    record_fault(info, "pause" if sig == signal.SIGSTOP else "resume", str(broker_id), pid=b.pid)
    click.echo(f"broker {broker_id} {verb} (pid {b.pid})")


@click.command("pause")
@click.argument("broker_id", type=int)
@root_option
def broker_pause(broker_id: int, data_dir: Path) -> None:
    """SIGSTOP broker BROKER_ID: it keeps its sockets but answers nothing (a zombie leader)."""
    _pause_resume(broker_id, data_dir, signal.SIGSTOP, "paused")


@click.command("resume")
@click.argument("broker_id", type=int)
@root_option
def broker_resume(broker_id: int, data_dir: Path) -> None:
    """SIGCONT a paused broker."""
    _pause_resume(broker_id, data_dir, signal.SIGCONT, "resumed")


@click.command("kill")
@click.option("--signal", "sig", type=click.Choice(["TERM", "KILL"]), default="KILL", show_default=True)
@root_option
def controller_kill(sig: str, data_dir: Path) -> None:
    """Send SIGKILL or SIGTERM to the cluster's controller."""
    info = _load(data_dir)
    if not send_signal(info.controller.pid, signal.Signals[f"SIG{sig}"]):
        raise click.ClickException("the controller is not running; `isrsim controller restart` starts it")
    record_fault(info, "kill" if sig == "KILL" else "term", "controller", signal=sig, pid=info.controller.pid)
    click.echo(f"sent SIG{sig} to the controller (pid {info.controller.pid})")


@click.command("restart")
@root_option
def controller_restart(data_dir: Path) -> None:
    """Stop the controller if it runs, then start it again (it bumps the controller epoch)."""
    info = _load(data_dir)
    try:
        if process_state(info.controller.pid) != "stopped":
            click.echo(f"controller: {stop_process(info.controller.pid, STOP_TIMEOUT_S)}")
        start_controller(info)
        info.save()
    except ClusterError as exc:
        raise _fail(exc) from None
    healed = heal_restarted(info, "controller")
    record_fault(info, "restart", "controller", pid=info.controller.pid, healed_links=healed)
    epoch = journal_events(Path(info.controller.journal), "controller_started")[-1].get("controller_epoch")
    click.echo(
        f"controller restarted on {info.controller.address} (pid {info.controller.pid}), epoch {epoch}"
    )
