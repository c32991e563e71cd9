"""``RaftManager``: the trio shell of one voter of the controller quorum (Kafka's ``KafkaRaftManager``).

It owns the :class:`~raft.raft_client.KafkaRaftClient` over the metadata log
(``<metadata.log.dir>/__cluster_metadata-0``, a :class:`~raft.metadata_log.MetadataLog`) and the
``quorum-state`` file, and drives it: one task polls the client when its next deadline comes or something
happened, the requests it asks for go to the other voters over one connection each (a voter's
``ControllerChannel``), their answers come back into the client, and the requests of the other voters
are answered by :meth:`handle`. A voter's FETCH that would get nothing new waits (long poll) up to its
``max_wait_ms`` for the log or the high watermark to move.

What the client journals (``quorum_state``) goes to the controller's journal; as the high watermark
moves, every voter reads the newly committed batches (``metadata_committed`` events, with their offsets,
epoch and CRC) and keeps the latest controller state record, from which a new active controller starts
(the cluster state, and the ACLs and SCRAM credentials the record carries).
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from protocol import environment
from protocol.api_keys import ApiKeys
from protocol.common import monotonic_ms, wall_clock_ms
from protocol.errors import Errors, InvalidRequestError
from protocol.records import decode_records, iter_batches
from raft import messages as rm
from raft import wire
from raft.election_state import FileQuorumStateStore
from raft.metadata_log import MetadataLog
from raft.quorum_state import QuorumConfig
from raft.raft_client import KafkaRaftClient
from raft.records import decode_record, encode_record
from server.controller_channel import CONTROLLER_UNREACHABLE, ControllerChannel

log = logging.getLogger(__name__)

CONTROLLER_STATE = "ControllerState"

VOTER_RECONNECT_BACKOFF_S = 0.05
VOTER_RECONNECT_BACKOFF_MAX_S = 0.5

Emit = Callable[[str, dict[str, Any]], None]


class RaftManager:
    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        directory: Path,
        config: QuorumConfig,
        *,
        cluster_id: str,
        emit: Emit,
        clock_ms: Callable[[], int] = monotonic_ms,
        rng: random.Random | None = None,
        listener_name: str = "CONTROLLER",
    ) -> None:
        self.node_id = node_id
        self.voters = voters
        # The listener the voters reach each other on (DESCRIBE_QUORUM's nodes name it).
        self.listener_name = listener_name
        self.cluster_id = cluster_id
        self.emit = emit
        self.clock_ms = clock_ms
        self.config = config
        self.log = MetadataLog.open(directory)
        self.client = KafkaRaftClient(
            node_id,
            list(voters),
            self.log,
            FileQuorumStateStore(directory),
            config,
            now_ms=clock_ms(),
            rng=rng or environment.new_random(f"raft-{node_id}"),
        )
        self.channels = {
            v: ControllerChannel(
                host,
                port,
                client_id=f"controller-{node_id}",
                request_timeout_s=config.request_timeout_ms / 1000,
                # Kafka's raft network client reconnects after 50 ms, backing off to at most 500 ms, so a
                # voter that comes back is reached again within half a second.
                retry_backoff_s=VOTER_RECONNECT_BACKOFF_S,
                retry_backoff_max_s=VOTER_RECONNECT_BACKOFF_MAX_S,
            )
            for v, (host, port) in voters.items()
            if v != node_id
        }
        self._wake = trio.Event()
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        # Committed records read so far, and the latest controller state among them.
        self.applied_offset = 0
        self.latest_state: dict[str, Any] | None = None
        self.latest_state_offset = -1
        # The size of the latest committed controller state record, and of the last one this voter appended.
        self.latest_state_bytes = 0
        self.appended_state_bytes = 0
        # The latest committed ACLs and SCRAM credentials (SecurityMetadata.to_json), None until a record
        # carries them.
        self.latest_security: dict[str, Any] | None = None
        self._pending_events: list[tuple[str, dict[str, Any]]] = []
        self._flush_effects()

    # ------------------------------------------------------------------------------------ running

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for channel in self.channels.values():
                await nursery.start(channel.run)
            task_status.started()
            try:
                await self._drive()
            finally:
                self._nursery = None

    async def _drive(self) -> None:
        while True:
            now = self.clock_ms()
            self.client.poll(now)
            self._flush_effects()
            wait_ms = max(0, self.client.next_deadline_ms() - self.clock_ms())
            with trio.move_on_after(min(wait_ms, 1000) / 1000):
                await self._wake.wait()
            self._wake = trio.Event()

    def wake(self) -> None:
        self._wake.set()

    def _notify_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            await self._changed.wait()

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------------------------------ effects

    def _flush_effects(self) -> None:
        effects = self.client.drain()
        for name, fields in effects.events:
            self.emit(name, fields)
        if effects.events:
            self._notify_changed()
        for out in effects.sends:
            if self._nursery is not None:
                self._nursery.start_soon(self._send, out)
        self._replay_committed()

    async def _send(self, out: Any) -> None:
        key, body = wire.request_to_wire(out.request, self.cluster_id)
        correlation_id = out.request.correlation_id
        channel = self.channels.get(out.destination)
        if channel is None:
            return
        timeout = self.config.request_timeout_ms / 1000
        if isinstance(out.request, rm.FetchRequest):
            timeout += out.request.max_wait_ms / 1000
        try:
            body_in = await channel.request(key, body, timeout_s=timeout)
            response = wire.response_from_wire(key, correlation_id, body_in)
        except (*CONTROLLER_UNREACHABLE, InvalidRequestError, KeyError) as exc:
            log.debug(
                "controller %d: %s to voter %d failed: %r", self.node_id, key.name, out.destination, exc
            )
            self.client.request_failed(out.destination, correlation_id, self.clock_ms())
            self.wake()
            return
        self.client.handle_response(out.destination, response, self.clock_ms())
        self._flush_effects()
        self.wake()

    def _replay_committed(self) -> None:
        """Read the batches below the high watermark not read yet: journal them, keep the latest state."""
        hw = self.client.high_watermark
        changed = False
        while self.applied_offset < hw:
            data = self.log.read(self.applied_offset, 1 << 20)
            if not data:
                break
            for position, header in iter_batches(data):
                if header.base_offset >= hw:
                    break
                _, records = decode_records(data, position)
                types: list[str] = []
                for record in records:
                    try:
                        decoded = decode_record(record.value)
                    except ValueError:
                        continue
                    types.append(str(decoded["type"]))
                    if decoded["type"] == CONTROLLER_STATE and isinstance(decoded.get("state"), dict):
                        self.latest_state = decoded["state"]
                        self.latest_state_offset = header.base_offset + record.offset_delta
                        self.latest_state_bytes = len(record.value or b"")
                        if isinstance(decoded.get("security"), dict):
                            self.latest_security = decoded["security"]
                self.emit(
                    "metadata_committed",
                    {
                        "offset": header.base_offset,
                        "last_offset": header.last_offset,
                        "leader_epoch": header.partition_leader_epoch,
                        "crc": header.crc,
                        "types": types,
                        "high_watermark": hw,
                    },
                )
                self.applied_offset = header.next_offset
                changed = True
            else:
                continue
            break
        if changed:
            self._notify_changed()

    # ------------------------------------------------------------------------------------ appends

    def append_state(
        self,
        decisions: list[str],
        state_json: dict[str, Any],
        security_json: dict[str, Any] | None = None,
    ) -> tuple[int, int] | None:
        """As leader: one ControllerState record (the state after ``decisions``, with the ACLs and SCRAM
        credentials when there are any); its offsets, or None."""
        fields: dict[str, Any] = {"decisions": decisions, "state": state_json}
        if security_json is not None:
            fields["security"] = security_json
        value = encode_record(CONTROLLER_STATE, **fields)
        offsets = self.client.append([value], self.clock_ms())
        self.appended_state_bytes = len(value)
        self._flush_effects()
        self._notify_changed()
        self.wake()
        return offsets

    async def wait_committed(
        self,
        last_offset: int,
        epoch: int,
        timeout_s: float,
        *,
        still_wanted: Callable[[], bool] = lambda: True,
    ) -> bool | None:
        """True once ``last_offset`` is below the high watermark while this voter still leads ``epoch``;
        False as soon as it no longer leads that epoch (or ``still_wanted()`` is false: the caller gave
        up); None if neither happened within ``timeout_s`` (the caller may wait again)."""
        with trio.move_on_after(timeout_s):
            while True:
                if not self.leads(epoch) or not still_wanted():
                    return False
                if self.client.high_watermark > last_offset:
                    return True
                await self._changed.wait()
        return None

    def leads(self, epoch: int) -> bool:
        """This voter is the leader of ``epoch``."""
        return self.client.epoch == epoch and self.client.is_leader()

    def notify_waiters(self) -> None:
        """Wakes whoever waits in :meth:`wait_committed` or :meth:`wait_changed` to look again."""
        self._notify_changed()

    def is_active(self) -> bool:
        """This voter leads and has committed an entry of its epoch (its LeaderChange)."""
        leader = self.client.leader_state
        return leader is not None and self.client.high_watermark > leader.epoch_start_offset

    # ------------------------------------------------------------------------------------ requests

    async def handle(self, key: ApiKeys, body: dict[str, Any]) -> dict[str, Any]:
        """The answer to another voter's VOTE, BEGIN/END_QUORUM_EPOCH or FETCH, or to DESCRIBE_QUORUM."""
        if key == ApiKeys.DESCRIBE_QUORUM:
            described = self.client.describe_quorum(self.clock_ms())
            offset = wall_clock_ms() - self.clock_ms()
            described = dataclasses.replace(
                described,
                current_voters=[
                    rm.ReplicaDescription(
                        v.replica_id,
                        v.log_end_offset,
                        v.last_fetch_timestamp + offset if v.last_fetch_timestamp >= 0 else -1,
                        v.last_caught_up_timestamp + offset if v.last_caught_up_timestamp >= 0 else -1,
                    )
                    for v in described.current_voters
                ],
            )
            return wire.describe_quorum_to_wire(described, self.voters, self.listener_name)
        request, cluster_id, sender = wire.request_from_wire(key, body)
        if cluster_id is not None and cluster_id != self.cluster_id:
            return wire.error_response(
                key, int(Errors.INCONSISTENT_CLUSTER_ID), self.client.leader_id, self.client.epoch
            )
        if (
            isinstance(request, rm.FetchRequest)
            and request.max_wait_ms > 0
            and self.client.would_wait(request)
        ):
            await self.wait_changed(request.max_wait_ms / 1000)
        response = self.client.handle_request(sender, request, self.clock_ms())
        self._flush_effects()
        self.wake()
        return wire.response_to_wire(key, response)

    def step_down(self, epoch: int) -> None:
        """A broker has seen a newer controller epoch than ``epoch``: if this voter still leads that epoch,
        it resigns (END_QUORUM_EPOCH; the answers name the newer leader)."""
        if self.client.is_leader() and self.client.epoch == epoch:
            self.client.resign(self.clock_ms())
            self._flush_effects()
            self.wake()

    async def resign(self) -> None:
        """A clean stop: a leader resigns and tells the voters (END_QUORUM_EPOCH), waiting briefly."""
        if not self.client.is_leader():
            return
        self.client.resign(self.clock_ms())
        self._flush_effects()
        with trio.move_on_after(min(1.0, self.config.request_timeout_ms / 1000)):
            while True:
                state = self.client.quorum.state
                if not getattr(state, "unacknowledged", None):
                    return
                await self.wait_changed(0.05)


__all__ = ["CONTROLLER_STATE", "RaftManager"]
