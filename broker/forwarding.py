"""Kafka's ``ForwardingManager`` (KIP-590): requests a broker does not decide itself (CreateTopics,
DeleteTopics, DescribeConfigs, DescribeQuorum, and the CreateTopics of auto-creation) go to the active
controller over the broker's controller channel; the controller's answer is the client's answer.

As Kafka's ``NodeToControllerChannelManager``, a request that meets a voter that is not the active
controller (NOT_CONTROLLER, 41; for DescribeQuorum, NOT_LEADER_OR_FOLLOWER naming the leader) or a
connection that was gone before the request could be written is sent again, to the leader it names or the
next voter, after a short back-off, until its timeout: during an election a client waits for the new
controller rather than failing at once. A request that was written to a controller and got no answer (its
time ran out, or the connection was lost while it waited) is never sent to another controller: it is
answered REQUEST_TIMED_OUT, so one request that a controller cannot cope with does not go on to the next
active controller, and the next (docs/controller.md).

Each forwarded request runs as its own task in the manager's nursery, so a handler never waits on the
controller. The broker authorizes the client before it forwards (the controller sees the broker's own
principal): ``KafkaApis`` removes what the client may not do and adds those refusals to the answer.
A controller that cannot be reached in time is answered REQUEST_TIMED_OUT, as Kafka's forwarding does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from protocol.api_keys import ApiKeys
from protocol.client import ConnectionClosed, RequestNotSent
from protocol.errors import Errors
from server.backoff import ExponentialBackoff
from server.controller_channel import ControllerChannel, NotControllerError

log = logging.getLogger(__name__)

# The controller's answer (a docs/protocol.md body), or None when it could not be reached (and why).
ForwardCallback = Callable[[dict[str, Any] | None, str], None]

RETRY_BACKOFF_S = 0.05
RETRY_BACKOFF_MAX_S = 1.0


def quorum_leader_redirect(answer: dict[str, Any]) -> int | None:
    """A DESCRIBE_QUORUM answer from a voter that is not the leader: the leader it names (-1: none known);
    None for any other answer."""
    try:
        partition = answer["topics"][0]["partitions"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if partition.get("error_code") != Errors.NOT_LEADER_OR_FOLLOWER:
        return None
    return int(partition.get("leader_id", -1))


class ForwardingManager:
    def __init__(
        self,
        broker_id: int,
        channel: ControllerChannel,
        voter_ids: dict[int, tuple[str, int]] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.channel = channel
        # Each voter's address by id: where a DESCRIBE_QUORUM that names the leader goes next.
        self.voter_ids = dict(voter_ids or {})
        self._nursery: trio.Nursery | None = None
        self.forwarded = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    def forward(self, api_key: ApiKeys, body: Any, callback: ForwardCallback, *, timeout_s: float) -> None:
        """Sends ``body`` to the controller; ``callback`` gets the answer (or None) in a later task."""
        nursery = self._nursery
        if nursery is None:
            callback(None, "the broker is not connected to the controller yet")
            return
        self.forwarded += 1
        nursery.start_soon(self._send, api_key, body, callback, timeout_s)

    async def _send(self, api_key: ApiKeys, body: Any, callback: ForwardCallback, timeout_s: float) -> None:
        response, why = await self._request(api_key, body, timeout_s)
        try:
            callback(response, why)
        except Exception:  # a bad answer fails this request, never the broker
            log.exception("broker %d: answering a forwarded %s failed", self.broker_id, api_key.name)

    async def _request(
        self, api_key: ApiKeys, body: Any, timeout_s: float
    ) -> tuple[dict[str, Any] | None, str]:
        """The active controller's answer, or None and why there is none: no answer within ``timeout_s``, or
        the one controller it was written to gave none (it is not sent to another)."""
        backoff = ExponentialBackoff(RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S)
        last: BaseException | str | None = None
        deadline = trio.current_time() + timeout_s
        address = f"{self.channel.host}:{self.channel.port}"
        with trio.move_on_after(timeout_s):
            while True:
                address = f"{self.channel.host}:{self.channel.port}"
                try:
                    remaining = max(0.0, deadline - trio.current_time())
                    response = await self.channel.request(api_key, body, timeout_s=remaining)
                except (NotControllerError, RequestNotSent) as exc:
                    last = exc  # the controller did not take it: it goes to the next one
                except (ConnectionClosed, OSError, trio.TooSlowError) as exc:
                    why = (
                        f"the controller at {address} did not answer {api_key.name} within {timeout_s:.1f} s"
                        if isinstance(exc, trio.TooSlowError)
                        else f"the connection to the controller at {address} was lost while it handled "
                        f"{api_key.name} ({exc})"
                    )
                    log.warning("broker %d: %s; not sent to another controller", self.broker_id, why)
                    return None, why
                else:
                    leader = quorum_leader_redirect(response) if api_key == ApiKeys.DESCRIBE_QUORUM else None
                    if leader is None:
                        return response, ""
                    last = f"the voter asked is not the quorum leader (leader {leader})"
                    voter = self.voter_ids.get(leader)
                    if voter is not None:
                        self.channel.follow(voter)
                await trio.sleep(backoff.next_s())
        log.info(
            "broker %d: %s not forwarded to the controller within %.1f s: %r",
            self.broker_id,
            api_key.name,
            timeout_s,
            last,
        )
        if last is None:  # still waiting on the first controller asked
            return None, f"the controller at {address} did not answer {api_key.name} within {timeout_s:.1f} s"
        return None, f"no controller took {api_key.name} within {timeout_s:.1f} s (the last: {last})"
