"""``isrsim demo``: the options; the demo itself is :mod:`lab.demo`."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("isrsim-demo"),
    show_default=True,
    help="The demo's own cluster root; it is wiped and recreated on every run.",
)
@click.option("--keep", is_flag=True, help="Leave the cluster running at the end (and skip the report).")
@click.option("--rate", type=int, default=5000, show_default=True, help="Workload records per second.")
@click.option("--seconds", type=int, default=25, show_default=True, help="How long the workload runs.")
@click.option("--secure", is_flag=True, help="The cluster on SASL_SSL, as `cluster up --secure` makes it.")
@click.option(
    "--client",
    type=click.Choice(["librdkafka", "isrsim"]),
    default="librdkafka",
    show_default=True,
    help="The workload's producer: Kafka's C client (confluent-kafka, acks=all, idempotent, linger.ms=5), "
    "or isrsim's own (`isrsim produce`).",
)
def demo(data_dir: Path, keep: bool, rate: int, seconds: int, secure: bool, client: str) -> None:
    """The main job: a cluster, an acks=all workload through a crash, a clean bounce and a zombie leader,
    then the consistency report."""
    from cli.report_cmd import require_report_extra

    if not keep:
        require_report_extra("demo")  # before a cluster is started for nothing
    if client == "librdkafka":
        from kit.librdkafka_producer import LibrdkafkaMissing, require_librdkafka

        try:
            require_librdkafka("`isrsim demo`")
        except LibrdkafkaMissing as exc:
            raise click.ClickException(str(exc)) from None
    from rich.console import Console

    from kit.cluster_files import ClusterError
    from lab.demo import run_demo

    try:
        verdict = run_demo(
            data_dir, keep=keep, rate=rate, seconds=seconds, secure=secure, console=Console(), client=client
        )
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from None
    if verdict != 0:
        raise SystemExit(verdict)
