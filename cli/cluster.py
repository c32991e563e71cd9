"""``isrsim cluster up|down|status``, ``isrsim broker kill|restart|pause|resume``, ``isrsim controller
kill|restart|pause|resume``: a local cluster of real processes under one data root."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import click
import trio

from broker import read_journal
from cli.output import OUTPUT_OPTION, echo_json
from kit.cluster_client import ClientError, parse_address
from kit.cluster_files import ClusterError, ClusterInfo, ProcessEntry
from kit.health import wait_healthy
from kit.local_cluster import (
    STOP_TIMEOUT_S,
    check_overrides,
    check_ports,
    check_same_settings,
    create_layout,
    heal_restarted,
    record_fault,
    start_broker,
    start_brokers,
    start_controllers,
    stop_brokers,
    stop_controllers,
    use_client_properties,
)
from kit.processes import process_state, send_signal, stop_process
from protocol import CLUSTER_FILE, FaultAction

DEFAULT_ROOT = Path("isrsim-data")


def root_option(f: Any) -> Any:
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=DEFAULT_ROOT,
        show_default=True,
        envvar="ISRSIM_DATA_DIR",
        help="The cluster root (cluster.json, controller*/, broker-<id>/, workload/); or $ISRSIM_DATA_DIR.",
    )(f)


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


# ---------------------------------------------------------------------------------------------- starting


# ---------------------------------------------------------------------------------------------- commands


@click.group()
def cluster() -> None:
    """Bring a local cluster (a controller quorum and N brokers) up and down, and watch it."""


@cluster.command("up")
@click.option("--brokers", type=click.IntRange(1, 50), default=3, show_default=True)
@click.option(
    "--controllers",
    type=click.IntRange(1, 9),
    default=3,
    show_default=True,
    help="Controller processes, ids from 1000: the voters of a Raft quorum (1: a single controller, no "
    "quorum). An odd number survives the loss of a minority: 3 survive one, 5 two.",
)
@root_option
@click.option(
    "--base-port",
    type=click.IntRange(0, 65000),
    default=9092,
    show_default=True,
    help="Broker N listens on base-port+N-1, controller 1000+K on base-port-1-K; 0 lets the OS pick every "
    "port.",
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
    controllers: int,
    data_dir: Path,
    base_port: int,
    overrides: tuple[str, ...],
    reset: bool,
    secure: bool,
) -> None:
    """Start the controllers (a quorum of --controllers voters) and N brokers as background processes;
    return when the cluster is healthy (a quorum leader is the active controller, every broker is
    registered and unfenced, every partition has a leader).

    Run again on a stopped cluster's root to start the same cluster (same ids, data and config); options
    that differ from those it was made with are refused unless --reset. All or nothing: every --override
    is checked before anything is written, and if a process fails to start, those started are stopped (and
    a root made by this command is removed).
    """
    from broker import BrokerConfig
    from cli.config_check import warn_unknown
    from controller import ControllerConfig

    # The processes inherit this environment: a misspelt ISRSIM_ variable is said here, not only in a log.
    warn_unknown("cluster up", [], [*BrokerConfig.KEYS, *BrokerConfig.ALIASES, *ControllerConfig.KEYS])
    try:
        settings = check_overrides(overrides)
        info, made = _prepare(ctx, data_dir, brokers, controllers, base_port, settings, reset, secure)
        use_client_properties(Path(info.root))
    except ClusterError as exc:
        raise _fail(exc) from None
    t0 = time.monotonic()
    try:
        start_controllers(info)
        info.save()
        for c in info.controllers:
            click.echo(f"controller {c.id} on {c.address} (pid {c.pid})" + _metrics_said(c))
        start_brokers(info)
        info.save()
        for b in info.brokers:
            click.echo(f"broker {b.id} on {b.address} (pid {b.pid})" + _metrics_said(b))
        wait_healthy(info)
    except BaseException as exc:
        _undo_up(info, made)
        if isinstance(exc, ClusterError):
            raise _fail(exc) from None
        raise
    n = len(info.controllers)
    quorum = (
        f"{n} controller{'s' if n > 1 else ''} (active: {_active_said(info)})"
        if info.quorum
        else "1 controller (no quorum)"
    )
    click.echo(
        f"cluster is up in {time.monotonic() - t0:.1f}s: {len(info.brokers)} brokers, {quorum}. "
        f"Data, journals and process logs under {info.root}"
    )
    # The addresses to give a client: the ports may not be the defaults (--base-port, or 0 for any free one).
    click.echo(f"bootstrap servers: {','.join(b.address for b in info.brokers)}")
    if info.settings.get("secure"):
        click.echo(
            f"secure: every listener is {info.settings.get('security_protocol')}; clients authenticate as "
            f"admin from {info.settings.get('client_config')} (mode 0600)"
        )
    where = "" if _is_default_root(data_dir) else f" --data-dir {data_dir}"
    click.echo(
        f"next: isrsim topic create t --partitions 6 --replication-factor {min(3, len(info.brokers))}"
        f"{where}; "
        f"isrsim cluster status{where}"
    )


def _active_said(info: ClusterInfo) -> str:
    from kit.controller_quorum import NoActiveController, find_active, voters_of

    try:
        view = trio.run(find_active, voters_of(info), 5.0)
    except NoActiveController:
        return "none yet"
    return f"{view.voter.id}, epoch {view.epoch}"


def _metrics_said(entry: ProcessEntry) -> str:
    return f", metrics {entry.metrics_url}" if entry.metrics_url else ""


def _is_default_root(data_dir: Path) -> bool:
    """Whether a later command finds this root without --data-dir (the default, or $ISRSIM_DATA_DIR)."""
    import os

    default = Path(os.environ.get("ISRSIM_DATA_DIR") or DEFAULT_ROOT)
    return data_dir.resolve() == default.resolve()


def _prepare(
    ctx: click.Context,
    data_dir: Path,
    brokers: int,
    controllers: int,
    base_port: int,
    settings: dict[str, str],
    reset: bool,
    secure: bool = False,
) -> tuple[ClusterInfo, bool]:
    """The cluster to start, and whether this command makes its root (then a failure removes it)."""
    import shutil

    given = {
        name
        for name in ("brokers", "controllers", "base_port", "overrides", "secure")
        if ctx.get_parameter_source(name) not in (click.core.ParameterSource.DEFAULT, None)
    }
    if (data_dir / CLUSTER_FILE).exists():
        info = ClusterInfo.load(data_dir)
        running = [p for p in [*info.controllers, *info.brokers] if process_state(p.pid) != "stopped"]
        if running:
            raise ClusterError(
                f"a cluster is already running at {data_dir} (pids {[p.pid for p in running]}); "
                "`isrsim cluster status` shows it, `isrsim cluster down` stops it"
            )
        if reset:
            shutil.rmtree(data_dir)
        else:
            check_same_settings(info, given, brokers, base_port, settings, data_dir, controllers)
            if "secure" in given and secure != bool(info.settings.get("secure")):
                raise ClusterError(
                    f"the cluster at {data_dir} was made {'without' if secure else 'with'} --secure; run "
                    f"`isrsim cluster up --data-dir {data_dir}` to start it as it is, or add --reset to "
                    "delete it (data included) and make a new one"
                )
            check_ports(
                [(c.port, _controller_said(info, c)) for c in info.controllers]
                + [(b.port, f"broker {b.id}") for b in info.brokers]
            )
            click.echo(f"starting the existing cluster at {info.root}")
            return info, False
    if base_port and base_port - controllers < 1:
        raise ClusterError(
            f"--base-port {base_port} leaves no room below it for {controllers} controllers' ports"
        )
    check_ports(
        [
            (
                0 if base_port == 0 else base_port - 1 - n,
                f"controller {1000 + n}" if controllers > 1 else "the controller",
            )
            for n in range(controllers)
        ]
        + [(0 if base_port == 0 else base_port + i - 1, f"broker {i}") for i in range(1, brokers + 1)]
    )
    made = not data_dir.exists() or not any(data_dir.iterdir())
    info = create_layout(
        data_dir,
        brokers,
        base_port,
        tuple(f"{k}={v}" for k, v in settings.items()),
        secure=secure,
        controllers=controllers,
    )
    return info, made


def _undo_up(info: ClusterInfo, made: bool) -> None:
    """A failed `cluster up` leaves nothing running, and no root it made itself."""
    import shutil

    for entry in [*info.brokers, *info.controllers]:
        if entry.pid and process_state(entry.pid) != "stopped":
            result = stop_process(entry.pid, 5)
            what = f"broker {entry.id}" if entry in info.brokers else _controller_said(info, entry)
            click.echo(f"stopped {what} (pid {entry.pid}): {result}", err=True)
        entry.pid = None
    if made:
        shutil.rmtree(info.root, ignore_errors=True)
    elif (Path(info.root) / CLUSTER_FILE).exists():
        info.save()


@cluster.command("down")
@root_option
def cluster_down(data_dir: Path) -> None:
    """Stop every broker, then the controllers. Data is kept.

    Brokers stop one at a time with a controlled shutdown (the controller moves their leaderships to the
    brokers still up) while one can succeed; a broker whose partitions have no other live in-sync replica
    stops without it. Each step and its outcome is printed.
    """
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None
    t0 = time.monotonic()
    stop_brokers(info, click.echo)
    stop_controllers(info, click.echo)
    click.echo(f"cluster at {info.root} is down ({time.monotonic() - t0:.1f}s); data kept")


@cluster.command("status")
@root_option
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True)
@click.option("--topic", default=None, help="Only this topic.")
@click.option(
    "--bootstrap-server",
    default=None,
    help="host:port[,host:port...] of a cluster this command did not start (docker compose): its nodes are "
    "found through the first that answers, instead of --data-dir's cluster.json.",
)
@OUTPUT_OPTION
def cluster_status(
    data_dir: Path, watch: bool, interval: float, topic: str | None, bootstrap_server: str | None, output: str
) -> None:
    """Brokers (alive, paused, fenced), then one row per partition: leader, epoch, replicas, ISR, and each
    replica's LEO, HW and lag."""
    from cli.status_view import StatusData, gather, gather_remote, render, status_document

    if bootstrap_server:
        try:
            bootstrap = [parse_address(a) for a in bootstrap_server.split(",") if a.strip()]
        except ClientError as exc:
            raise click.BadParameter(str(exc), param_hint="--bootstrap-server") from None

        def collect() -> StatusData:
            return trio.run(gather_remote, bootstrap, topic)

    else:
        try:
            ClusterInfo.load(data_dir)
        except ClusterError as exc:
            raise _fail(exc) from None

        def collect() -> StatusData:
            return trio.run(gather, ClusterInfo.load(data_dir), topic)

    if output == "json":
        if watch:
            raise click.BadParameter("--watch draws on a terminal; with -o json, run the command again")
        echo_json(status_document(collect()))
        return
    from rich.console import Console
    from rich.live import Live

    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # a log or a pipe: do not wrap the offsets column at 80
    if not watch:
        console.print(render(collect()))
        return

    def frame() -> Any:
        stamp = f"{time.strftime('%H:%M:%S')}, every {interval:g}s; Ctrl-C to stop"
        return render(collect(), refreshed=stamp)

    try:
        with Live(frame(), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(frame())
    except KeyboardInterrupt:
        pass


# ---------------------------------------------------------------------------------------------- brokers


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
    record_fault(
        info, FaultAction.KILL if sig == "KILL" else FaultAction.TERM, str(broker_id), signal=sig, pid=b.pid
    )
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
    record_fault(info, FaultAction.RESTART, str(b.id), pid=b.pid, healed_links=healed)
    click.echo(f"broker {b.id} restarted on {b.address} (pid {b.pid})")


def _pause_resume(broker_id: int, data_dir: Path, sig: signal.Signals, verb: str) -> None:
    info = _load(data_dir)
    try:
        b = info.broker(broker_id)
    except ClusterError as exc:
        raise _fail(exc) from None
    if not send_signal(b.pid, sig):
        raise click.ClickException(f"broker {broker_id} is not running")
    record_fault(
        info, FaultAction.PAUSE if sig == signal.SIGSTOP else FaultAction.RESUME, str(broker_id), pid=b.pid
    )
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


def _controller_entry(info: ClusterInfo, controller_id: int | None, active: bool) -> ProcessEntry:
    """The controller a command names: by id, the active one (--active: the quorum leader, found with
    DESCRIBE_QUORUM from any live voter), or the only one of a cluster without a quorum."""
    from kit.controller_quorum import NoActiveController, find_active, voters_of

    if controller_id is not None and active:
        raise click.UsageError("give a controller ID or --active, not both")
    try:
        if active:
            running = [v for v in voters_of(info) if process_state(v.pid) == "running"]
            if not running:
                raise ClusterError("no controller is running; `isrsim controller restart ID` starts one")
            view = trio.run(find_active, running, 15.0)
            assert view.voter.id is not None
            return info.controller_by_id(view.voter.id)
        if controller_id is None:
            if info.several_voters:
                ids = ", ".join(str(c.id) for c in info.controllers)
                raise click.UsageError(f"name a controller: ID (one of {ids}) or --active")
            return info.controller
        return info.controller_by_id(controller_id)
    except (ClusterError, NoActiveController) as exc:
        raise _fail(exc) from None


def _controller_said(info: ClusterInfo, c: ProcessEntry) -> str:
    return f"controller {c.id}" if info.quorum else "the controller"


@click.command("kill")
@click.argument("controller_id", type=int, required=False)
@click.option("--active", is_flag=True, help="The active controller (the quorum leader).")
@click.option("--signal", "sig", type=click.Choice(["TERM", "KILL"]), default="KILL", show_default=True)
@root_option
def controller_kill(controller_id: int | None, active: bool, sig: str, data_dir: Path) -> None:
    """Send SIGKILL (crash) or SIGTERM (clean stop: a quorum leader resigns with END_QUORUM_EPOCH) to
    controller CONTROLLER_ID, or to the active one (--active). A cluster with one controller needs
    neither."""
    info = _load(data_dir)
    c = _controller_entry(info, controller_id, active)
    if process_state(c.pid) == "paused" and sig == "TERM":
        send_signal(c.pid, signal.SIGCONT)
    if not send_signal(c.pid, signal.Signals[f"SIG{sig}"]):
        again = f" {c.id}" if info.several_voters else ""
        raise click.ClickException(
            f"{_controller_said(info, c)} is not running; `isrsim controller restart{again}` starts it"
        )
    record_fault(
        info,
        FaultAction.KILL if sig == "KILL" else FaultAction.TERM,
        info.node_name(c),
        signal=sig,
        pid=c.pid,
    )
    click.echo(f"sent SIG{sig} to {_controller_said(info, c)} (pid {c.pid})")


@click.command("restart")
@click.argument("controller_id", type=int, required=False)
@click.option(
    "--force",
    is_flag=True,
    help="Restart it even if it is running (it is stopped cleanly first; a voter then rejoins).",
)
@root_option
def controller_restart(controller_id: int | None, force: bool, data_dir: Path) -> None:
    """Start controller CONTROLLER_ID again on its metadata log (after `controller kill`, or a crash). A
    running one is left alone unless --force: then it is stopped cleanly first (a quorum leader resigns).
    A cluster with one controller needs no ID (its restart bumps the controller epoch)."""
    info = _load(data_dir)
    c = _controller_entry(info, controller_id, False)
    state = process_state(c.pid)
    if state != "stopped" and not force:
        name = _controller_said(info, c)
        again = f" {c.id}" if info.several_voters else ""
        raise click.ClickException(
            f"{name} is running (pid {c.pid}, {state}): a restart would stop it first; pass --force to "
            f"restart it anyway (`isrsim controller restart{again} --force`), or stop it with "
            f"`isrsim controller kill{again}`"
        )
    try:
        if process_state(c.pid) != "stopped":
            click.echo(f"{_controller_said(info, c)}: {stop_process(c.pid, STOP_TIMEOUT_S)}")
        start_controllers(info, [c])
        info.save()
    except ClusterError as exc:
        raise _fail(exc) from None
    healed = heal_restarted(info, info.node_name(c))
    record_fault(info, FaultAction.RESTART, info.node_name(c), pid=c.pid, healed_links=healed)
    if info.quorum:
        click.echo(
            f"{_controller_said(info, c)} restarted on {c.address} (pid {c.pid}); it rejoins the quorum "
            "(`isrsim cluster status` shows its role)"
        )
        return
    epoch = read_journal(Path(c.journal), "controller_started")[-1].get("controller_epoch")
    click.echo(f"{_controller_said(info, c)} restarted on {c.address} (pid {c.pid}), epoch {epoch}")


def _controller_pause_resume(
    controller_id: int | None, active: bool, data_dir: Path, sig: signal.Signals
) -> None:
    info = _load(data_dir)
    c = _controller_entry(info, controller_id, active)
    if not send_signal(c.pid, sig):
        raise click.ClickException(f"{_controller_said(info, c)} is not running")
    verb = "paused" if sig == signal.SIGSTOP else "resumed"
    record_fault(
        info, FaultAction.PAUSE if sig == signal.SIGSTOP else FaultAction.RESUME, info.node_name(c), pid=c.pid
    )
    click.echo(f"{_controller_said(info, c)} {verb} (pid {c.pid})")


@click.command("pause")
@click.argument("controller_id", type=int, required=False)
@click.option("--active", is_flag=True, help="The active controller (the quorum leader).")
@root_option
def controller_pause(controller_id: int | None, active: bool, data_dir: Path) -> None:
    """SIGSTOP controller CONTROLLER_ID (or the active one): it keeps its sockets and answers nothing, so
    the other voters elect a new leader; when it resumes, its old epoch is refused."""
    _controller_pause_resume(controller_id, active, data_dir, signal.SIGSTOP)


@click.command("resume")
@click.argument("controller_id", type=int, required=False)
@root_option
def controller_resume(controller_id: int | None, data_dir: Path) -> None:
    """SIGCONT a paused controller."""
    _controller_pause_resume(controller_id, False, data_dir, signal.SIGCONT)
