"""``isrsim health HOST:PORT``: the containers' healthcheck, so it loads only what one request needs."""

from __future__ import annotations

import click


@click.command()
@click.argument("address")
@click.option("--timeout", type=float, default=3.0, show_default=True)
def health(address: str, timeout: float) -> None:
    """Exit 0 if the broker or controller at ADDRESS (host:port) answers API_VERSIONS (for healthchecks)."""
    import trio

    from kit.cluster_client import ClientError, parse_address
    from kit.node_query import ask
    from protocol import ApiKeys

    try:
        host, port = parse_address(address)
    except ClientError as exc:
        raise click.BadParameter(str(exc)) from None
    resp = trio.run(ask, host, port, ApiKeys.API_VERSIONS, {}, timeout)
    if resp is None or resp.get("error_code", 0) != 0:
        raise click.ClickException(f"{address} did not answer API_VERSIONS within {timeout}s")
    click.echo(f"{address} is up ({len(resp.get('api_keys', []))} APIs)")
