"""``isrsim health HOST:PORT``: the containers' healthcheck, so it loads only what one request needs."""

from __future__ import annotations

import click


@click.command()
@click.argument("address")
@click.option("--timeout", type=float, default=3.0, show_default=True)
def health(address: str, timeout: float) -> None:
    """Exit 0 if the broker or controller at ADDRESS (host:port) answers API_VERSIONS (for healthchecks);
    a voter of a controller quorum must also know the quorum's leader (DESCRIBE_QUORUM): until one is
    elected the quorum cannot decide anything, so it is not ready. A broker must be RUNNING: registered
    and unfenced by the controller, so that topics can be placed on it."""
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
    apis = {k.get("api_key") for k in resp.get("api_keys", [])}
    said = ""
    # A broker serves DESCRIBE_QUORUM too (it forwards it to the active controller): only a broker serves
    # DESCRIBE_REPLICA_STATE, so that decides which it is.
    if int(ApiKeys.DESCRIBE_REPLICA_STATE) in apis:
        # A broker: Kafka's BrokerState. One that does not say (denied, say) is taken as up.
        state = trio.run(ask, host, port, ApiKeys.DESCRIBE_REPLICA_STATE, {"topics": []}, timeout)
        broker_state = str((state or {}).get("broker_state", "RUNNING"))
        if state is None:
            raise click.ClickException(f"{address} did not answer DESCRIBE_REPLICA_STATE within {timeout}s")
        if broker_state != "RUNNING":
            raise click.ClickException(
                f"{address} is a broker in state {broker_state}, not RUNNING"
                " (not yet registered and unfenced by the controller, or stopping)"
            )
        said = f"; broker {state.get('broker_id', -1)} RUNNING"
    elif int(ApiKeys.DESCRIBE_QUORUM) in apis:
        quorum = trio.run(ask, host, port, ApiKeys.DESCRIBE_QUORUM, {}, timeout)
        try:
            part = (quorum or {})["topics"][0]["partitions"][0]
        except (KeyError, IndexError, TypeError):
            part = {}
        leader, epoch = int(part.get("leader_id", -1)), int(part.get("leader_epoch", -1))
        if leader < 0:
            raise click.ClickException(f"{address} is a controller quorum voter that knows no leader yet")
        said = f"; quorum leader {leader}, epoch {epoch}"
    click.echo(f"{address} is up ({len(resp.get('api_keys', []))} APIs{said})")
