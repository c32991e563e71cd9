"""``isrsim cluster up|down|status``, ``isrsim broker kill|restart|pause|resume``, ``isrsim controller
kill|restart``: a local cluster of real processes under one data root."""

from __future__ import annotations

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
    journal_events,
    process_state,
    send_signal,
    spawn,
    stop_process,
    wait_started,
    write_properties,
)
from cli.fault_journal import append_fault
from cli.node_query import ask_sync
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
        help="The cluster root (cluster.json, controller/, broker-<id>/, workload/).",
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
        f"listeners=PLAINTEXT://127.0.0.1:{port}"
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


def create_layout(root: Path, brokers: int, base_port: int, overrides: tuple[str, ...]) -> ClusterInfo:
    root = root.resolve()
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
    write_properties(
        Path(controller.config),
        {
            "node.id": CONTROLLER_ID,
            "listeners": f"PLAINTEXT://127.0.0.1:{controller_port}",
            "metadata.log.dir": cdir,
            **{k: v for k, v in settings.items() if k in _CONTROLLER_SHARED_KEYS | _CONTROLLER_ONLY_KEYS},
        },
    )
    info = ClusterInfo(
        root=str(root), cluster_id="isrsim", controller=controller, created_ms=int(time.time() * 1000)
    )
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
        )
        write_properties(
            Path(entry.config),
            {
                "broker.id": i,
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "log.dirs": entry.data_dir,
                "journal.dir": bdir,
                "controller.quorum.voters": f"{CONTROLLER_ID}@127.0.0.1:{controller_port}",
                **{k: v for k, v in settings.items() if k not in _CONTROLLER_ONLY_KEYS},
            },
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
# Keys only the controller has (`cluster up --override` passes them to it and not to the brokers).
_CONTROLLER_ONLY_KEYS = {"controller.socket.timeout.ms", "controller.retry.backoff.ms"}


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
def cluster_up(brokers: int, data_dir: Path, base_port: int, overrides: tuple[str, ...]) -> None:
    """Start a controller and N brokers as background processes; return when the cluster is healthy.

    Run again on a stopped cluster's root to start the same cluster (same ids, data and config).
    """
    for o in overrides:
        if "=" not in o:
            raise click.BadParameter(f"--override {o!r}: expected key=value")
    try:
        if (data_dir / "cluster.json").exists():
            info = ClusterInfo.load(data_dir)
            running = [p for p in [info.controller, *info.brokers] if process_state(p.pid) != "stopped"]
            if running:
                raise ClusterError(
                    f"a cluster is already running at {data_dir} (pids {[p.pid for p in running]}); "
                    "`isrsim cluster status` shows it, `isrsim cluster down` stops it"
                )
            click.echo(f"starting the existing cluster at {info.root}")
        else:
            info = create_layout(data_dir, brokers, base_port, overrides)
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
    except ClusterError as exc:
        raise _fail(exc) from None
    click.echo(
        f"cluster is up: {len(info.brokers)} brokers. Data, journals and process logs under {info.root}"
    )
    click.echo("next: isrsim topic create t --partitions 6 --replication-factor 3; isrsim cluster status")


def stop_brokers(info: ClusterInfo, echo: bool = True) -> None:
    """SIGTERM to every broker at once (each does its controlled shutdown), then wait for all."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(info.brokers))) as pool:
        results = list(pool.map(lambda b: stop_process(b.pid, STOP_TIMEOUT_S), info.brokers))
    for b, result in zip(info.brokers, results, strict=True):
        if echo:
            click.echo(f"broker {b.id}: {result}")
        b.pid = None
    info.save()


@cluster.command("down")
@root_option
def cluster_down(data_dir: Path) -> None:
    """Stop every broker (cleanly: controlled shutdown), then the controller. Data is kept."""
    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None
    stop_brokers(info)
    click.echo(f"controller: {stop_process(info.controller.pid, STOP_TIMEOUT_S)}")
    info.controller.pid = None
    info.save()


@cluster.command("status")
@root_option
@click.option("--watch", is_flag=True, help="Refresh every --interval seconds until Ctrl-C.")
@click.option("--interval", type=float, default=1.0, show_default=True)
@click.option("--topic", default=None, help="Only this topic.")
def cluster_status(data_dir: Path, watch: bool, interval: float, topic: str | None) -> None:
    """Brokers (alive, paused, fenced), then one row per partition: leader, epoch, replicas, ISR, and each
    replica's LEO, HW and lag."""
    from rich.console import Console
    from rich.live import Live

    from cli.status_view import gather, render

    try:
        info = ClusterInfo.load(data_dir)
    except ClusterError as exc:
        raise _fail(exc) from None
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
    """A process fault goes into <root>/faults.jsonl (SPEC §7), as network faults do."""
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


def register(cli: click.Group, broker_group: click.Group, controller_group: click.Group) -> None:
    cli.add_command(cluster)
    for cmd in (broker_kill, broker_restart, broker_pause, broker_resume):
        broker_group.add_command(cmd)
    controller_group.add_command(controller_kill)
    controller_group.add_command(controller_restart)
