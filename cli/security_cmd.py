"""``isrsim security init``: the TLS and SASL files of a cluster whose nodes are started by something else
(docker compose, docs/docker.md), as ``cluster up --secure`` makes them for its own (docs/security.md).

::

    isrsim security init DIR --node controller --node broker-1 --node broker-2 \\
        --credentials controller=/data/controller --credentials broker-1=/data/broker-1/data

writes under DIR: ``security/ca.pem`` and ``ca-key.pem`` (the key in ``--ca-key-dir`` instead, when
given, so that what the nodes and clients mount holds no key that can sign certificates); per node
``<node>/security/keystore.pem`` (its certificate names the node, ``localhost``, ``127.0.0.1`` and every
``--host``) and ``<node>/security.properties`` (the node's TLS and SASL keys, to pass as ``--config``); and
``client.properties`` for the super user ``admin``. ``--credentials NODE=DATA_DIR`` writes the SCRAM
credentials where that node reads them (``DATA_DIR/security/credentials.json``: a broker's ``log.dirs``, the
controller's ``metadata.log.dir``), as ``kafka-storage format --add-scram`` does. Every secret file is 0600.
When DIR already holds a CA nothing is made again (a restarted compose keeps its passwords).
"""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def security() -> None:
    """TLS certificates and SCRAM users for a cluster (docs/security.md)."""


@security.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--node", "nodes", multiple=True, required=True, help="A node to certify (its host name).")
@click.option("--host", "hosts", multiple=True, help="Another name on every node's certificate.")
@click.option(
    "--credentials",
    "credentials",
    multiple=True,
    help="NODE=DATA_DIR: write NODE's credentials to DATA_DIR/security/credentials.json.",
)
@click.option(
    "--ca-key-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the CA's private key goes (default DIRECTORY/security, beside ca.pem): keep it out of "
    "what the nodes and clients mount.",
)
def init(
    directory: Path,
    nodes: tuple[str, ...],
    hosts: tuple[str, ...],
    credentials: tuple[str, ...],
    ca_key_dir: Path | None,
) -> None:
    """Make a CA, a certificate and security.properties per node, SCRAM users admin and broker, and
    client.properties, under DIRECTORY."""
    from kit.security_files import DEFAULT_HOSTS, SecureSetup, write_node_properties

    targets: dict[str, Path] = {}
    for item in credentials:
        name, sep, path = item.partition("=")
        if not sep or name not in nodes:
            raise click.BadParameter(
                f"{item!r}: expected NODE=DATA_DIR with NODE one of --node", param_hint="--credentials"
            )
        targets[name] = Path(path)
    if (directory / "security" / "ca.pem").exists():
        click.echo(f"{directory} already holds a CA: nothing made (delete it to start over)")
        return
    setup = SecureSetup.create(directory, ca_key_dir)
    for name in nodes:
        node_dir = directory / name
        data_dir = targets.get(name, node_dir)
        settings = setup.node_settings(name, node_dir, data_dir, hosts=(name, *DEFAULT_HOSTS, *hosts))
        write_node_properties(node_dir / "security.properties", settings)
        click.echo(f"{name}: {node_dir / 'security.properties'}; credentials in {data_dir / 'security'}")
    click.echo(f"clients: {setup.write_client_properties()} (the super user admin)")
