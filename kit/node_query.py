"""One request to one node (a broker or the controller): :func:`request` raises whatever goes wrong (for
programs that expect an answer: the benchmarks, the tests' fixtures); :func:`ask` is for the commands that
look at a cluster (``cluster status``, ``topic``, ``health``, ``demo``).

A node that does not answer (refused, closed, stopped, paused, too slow) is an ordinary state of a cluster
under test: ``ask`` returns None and the caller shows it. Anything else that goes wrong is a bug in isrsim:
it is logged with its type and message and raised as :class:`QueryError`, whose message is one line for
the user.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from kit.cluster_files import ProcessEntry
from kit.errors import KitError
from protocol import ApiKeys, AuthenticationFailed, ClientSecurity, ConnectionClosed, open_connection

log = logging.getLogger(__name__)

# What "no answer" looks like: the connection is refused or lost, or the answer is late.
NO_ANSWER: tuple[type[Exception], ...] = (OSError, ConnectionClosed, trio.TooSlowError)


class QueryError(KitError):
    """A request failed for a reason other than the node not answering (a bug); the message is one line for
    the user (the CLI shows it as its error)."""


def api_name(api_key: int) -> str:
    try:
        return ApiKeys(api_key).name
    except ValueError:
        return f"API {api_key}"


async def request(
    host: str,
    port: int,
    api_key: int,
    body: Any,
    *,
    api_version: int = 0,
    timeout: float = 10.0,
    security: ClientSecurity | None = None,
    client_id: str = "isrsim-cli",
) -> dict[str, Any]:
    """One request on a new connection (TLS and SASL as ``security`` says, else as the process's client
    security); the response body. Whatever goes wrong is raised."""
    async with open_connection(
        host, port, client_id=client_id, security=security, connect_timeout=timeout
    ) as conn:
        return await conn.request(api_key, body, api_version=api_version, timeout=timeout)


async def ask(
    host: str, port: int, api_key: int, body: dict[str, Any], timeout: float = 2.0
) -> dict[str, Any] | None:
    """One request; None if the process does not answer in time (stopped, paused, busy)."""
    try:
        with trio.fail_after(timeout):
            return await request(host, port, api_key, body, timeout=timeout)
    except AuthenticationFailed as exc:
        raise QueryError(
            f"{host}:{port} refused this client: {exc} (check the cluster root's client.properties, "
            "--command-config FILE, or --user/--password)"
        ) from None
    except NO_ANSWER:
        return None
    except Exception as exc:
        what = f"{api_name(api_key)} to {host}:{port} failed: {type(exc).__name__}: {exc}"
        log.error("%s", what)
        log.debug("%s", what, exc_info=exc)
        raise QueryError(f"{what} (a bug in isrsim, not a node that is down)") from exc


def ask_sync(
    entry: ProcessEntry, api_key: int, body: dict[str, Any], timeout: float = 2.0
) -> dict[str, Any] | None:
    return trio.run(ask, entry.host, entry.port, api_key, body, timeout)


def first_query_error(group: BaseExceptionGroup[Any]) -> QueryError | None:
    """The first :class:`QueryError` in ``group`` (from ``ask`` calls run in a nursery), to raise alone."""
    matched, _ = group.split(QueryError)
    if matched is None:
        return None
    while isinstance(matched, BaseExceptionGroup):
        matched = matched.exceptions[0]
    assert isinstance(matched, QueryError)
    return matched
