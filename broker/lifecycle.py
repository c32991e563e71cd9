"""A managed broker's link to the controller (Kafka's ``BrokerLifecycleManager`` and, underneath,
``NodeToControllerChannelManager``).

``BrokerLifecycleManager.run`` registers the broker (BROKER_REGISTRATION with a fresh incarnation id per
process), then sends BROKER_HEARTBEAT every ``broker.heartbeat.interval.ms``. When the controller is
unreachable it keeps trying, reconnecting with back-off; when the controller answers STALE_BROKER_EPOCH
or BROKER_ID_NOT_REGISTERED (it lost this broker's registration) it registers again. ``broker_epoch`` is
the epoch of the current registration (-1 before the first one).

As Kafka's (KAFKA-14392), a registration or heartbeat waits for its answer at most half of
``broker.session.timeout.ms``, not the channel's ``request.timeout.ms``: a heartbeat lost in a network
fault would otherwise keep the next one from being sent for 30 s, and a broker whose isolation healed
would stay fenced that long. After a failure the next attempt follows an exponential back-off from
100 ms up to the same half session (Kafka's ``resendExponentialBackoff``), not the heartbeat interval.
docs/controller.md says what a healed broker waits for.

``controlled_shutdown`` asks the controller to move this broker's leaderships away (CONTROLLED_SHUTDOWN,
retried until no replicated leadership remains or the timeout), then sends a last heartbeat with
``want_shut_down`` so the controller fences the broker at once instead of waiting for its session to
expire. Heartbeats sent afterwards keep ``want_shut_down`` set, so the broker is not unfenced again.

The connection underneath is ``server.controller_channel.ControllerChannel``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from protocol import controller_messages as cm
from protocol import environment
from protocol.api_keys import ApiKeys
from protocol.common import error_name
from protocol.errors import Errors
from protocol.schema import from_body
from server.backoff import ExponentialBackoff
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel

log = logging.getLogger(__name__)


class BrokerLifecycleManager:
    def __init__(
        self,
        broker_id: int,
        cluster_id: str,
        channel: ControllerChannel,
        endpoint: Callable[[], tuple[str, int] | list[tuple[str, str, int]]],
        *,
        heartbeat_interval_ms: int,
        session_timeout_ms: int = 9000,
        incarnation_id: str | None = None,
        on_fenced_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.channel = channel
        self.endpoint = endpoint
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000.0
        # Kafka's heartbeat channel: requests time out at half the session (KAFKA-14392).
        self.request_timeout_s = session_timeout_ms / 2000.0
        self.incarnation_id = incarnation_id or environment.uuid4()
        self.on_fenced_change = on_fenced_change
        self.broker_epoch = -1
        self.is_fenced = True
        self.registered = trio.Event()
        self.unfenced = trio.Event()
        self.want_shut_down = False
        self.offline_log_dirs: list[str] = []
        self.registrations = 0
        self.heartbeats = 0
        self._wake = trio.Event()

    # ------------------------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Registers and heartbeats until cancelled (with the component that owns it)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.channel.run)
            task_status.started()
            resend = ExponentialBackoff(0.1, max(0.1, self.request_timeout_s))
            while True:
                try:
                    if self.broker_epoch < 0:
                        await self._register()
                    if self.broker_epoch >= 0:
                        await self._heartbeat()
                    resend.reset()
                    wait_s = self.heartbeat_interval_s
                except CONTROLLER_UNREACHABLE as exc:
                    log.debug("broker %d: controller request failed: %r", self.broker_id, exc)
                    wait_s = resend.next_s()
                with trio.move_on_after(wait_s):
                    await self._wake.wait()
                self._wake = trio.Event()

    async def _register(self) -> None:
        # Every advertised listener (name, host, port), the inter-broker one first; (host, port): PLAINTEXT.
        found = self.endpoint()
        listeners = [("PLAINTEXT", *found)] if isinstance(found, tuple) else found
        body = await self.channel.request(
            ApiKeys.BROKER_REGISTRATION,
            cm.BrokerRegistrationRequest(
                broker_id=self.broker_id,
                cluster_id=self.cluster_id,
                incarnation_id=self.incarnation_id,
                listeners=[
                    cm.BrokerRegistrationRequestListener(name=name, host=host, port=port)
                    for name, host, port in listeners
                ],
            ),
            timeout_s=self.request_timeout_s,
        )
        resp = from_body(cm.BrokerRegistrationResponse, body)
        if resp.error_code != Errors.NONE:
            error = Errors(resp.error_code)
            log.error(
                "broker %d: the controller refused its registration: %s%s",
                self.broker_id,
                error.name,
                " (cluster.id differs from the controller's)"
                if error == Errors.INCONSISTENT_CLUSTER_ID
                else "",
            )
            return
        self.broker_epoch = resp.broker_epoch
        self.registrations += 1
        self._set_fenced(True)
        log.info(
            "broker %d registered with the controller: broker epoch %d, incarnation %s",
            self.broker_id,
            self.broker_epoch,
            self.incarnation_id,
        )
        self.registered.set()

    async def _heartbeat(self) -> cm.BrokerHeartbeatResponse:
        body = await self.channel.request(
            ApiKeys.BROKER_HEARTBEAT,
            cm.BrokerHeartbeatRequest(
                broker_id=self.broker_id,
                broker_epoch=self.broker_epoch,
                want_shut_down=self.want_shut_down,
                offline_log_dirs=list(self.offline_log_dirs),
            ),
            timeout_s=self.request_timeout_s,
        )
        resp = from_body(cm.BrokerHeartbeatResponse, body)
        self.heartbeats += 1
        if resp.error_code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
            log.warning(
                "broker %d: controller answered %s to a heartbeat with broker epoch %d; registering again",
                self.broker_id,
                error_name(resp.error_code),
                self.broker_epoch,
            )
            self.broker_epoch = -1
            self._wake.set()
        elif resp.error_code != Errors.NONE:
            log.warning("broker %d: heartbeat failed: %s", self.broker_id, error_name(resp.error_code))
        else:
            self._set_fenced(resp.is_fenced)
        return resp

    def report_offline_log_dirs(self, log_dirs: list[str]) -> None:
        """Every heartbeat from now on names ``log_dirs`` as offline; one is sent at once. The controller
        fences the broker, moving its leaderships to other replicas and taking it out of ISRs."""
        self.offline_log_dirs = sorted(log_dirs)
        self._wake.set()

    def _set_fenced(self, fenced: bool) -> None:
        if fenced == self.is_fenced:
            return
        self.is_fenced = fenced
        log.info("broker %d is %s by the controller", self.broker_id, "fenced" if fenced else "unfenced")
        if fenced:
            self.unfenced = trio.Event()
        else:
            self.unfenced.set()
        if self.on_fenced_change is not None:
            self.on_fenced_change(fenced)

    # ------------------------------------------------------------------------------------ shutdown

    async def controlled_shutdown(self, timeout_s: float, retry_backoff_s: float = 0.5) -> bool:
        """Moves this broker's leaderships away before it stops. True if the controller reported no
        remaining replicated leadership (and was told the broker is going) within ``timeout_s``."""
        done = False
        with trio.move_on_after(timeout_s):
            while not done:
                try:
                    if self.broker_epoch < 0:
                        await self.registered.wait()
                    body = await self.channel.request(
                        ApiKeys.CONTROLLED_SHUTDOWN,
                        cm.ControlledShutdownRequest(
                            broker_id=self.broker_id, broker_epoch=self.broker_epoch
                        ),
                    )
                    resp = from_body(cm.ControlledShutdownResponse, body)
                    if resp.error_code == Errors.NONE and not resp.remaining_partitions:
                        done = True
                        break
                    log.info(
                        "broker %d: controlled shutdown not complete (%s, still leading %s); retrying",
                        self.broker_id,
                        error_name(resp.error_code),
                        [f"{p.topic_name}-{p.partition_index}" for p in resp.remaining_partitions],
                    )
                except CONTROLLER_UNREACHABLE as exc:
                    log.info(
                        "broker %d: controlled shutdown request failed (%r); retrying", self.broker_id, exc
                    )
                await trio.sleep(retry_backoff_s)
            self.want_shut_down = True
            try:
                await self._heartbeat()
            except CONTROLLER_UNREACHABLE as exc:
                log.info("broker %d: last heartbeat failed (%r)", self.broker_id, exc)
        if not done:
            log.warning(
                "broker %d: controlled shutdown did not complete in %.1fs; stopping anyway (the controller "
                "will elect new leaders when its session expires)",
                self.broker_id,
                timeout_s,
            )
        self.want_shut_down = True
        return done


__all__ = ["BrokerLifecycleManager"]
