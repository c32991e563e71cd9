"""The controller quorum as a client sees it (SPEC §11, docs/controller.md): each voter's view of the quorum
(DESCRIBE_QUORUM, 55), and requests that reach the active controller through any voter.

A voter that is not the active controller answers every controller API with NOT_CONTROLLER (41), and
DESCRIBE_QUORUM with NOT_LEADER_OR_FOLLOWER naming the leader it knows; the leader answers DESCRIBE_QUORUM
with every voter's log end offset. :func:`ask_controller` asks every voter at once (short timeouts: a
paused voter accepts connections and answers nothing), sends the request to the leader they name, and while
an election runs (no leader, a dead or paused leader, a leader not yet active) tries again, for at most
:data:`CONTROLLER_WAIT_S`. A single controller (no quorum) is asked directly, as before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import trio

from kit.cluster_files import ClusterError, ClusterInfo, ProcessEntry
from kit.node_query import ask
from kit.processes import process_state
from kit.reachability import CLUSTER_HINT, NOTHING_LISTENING, is_listening, nothing_listening
from protocol import ApiKeys, Errors

# How long a request waits for an active controller: a dead leader is noticed by the followers within
# controller.quorum.fetch.timeout.ms (2 s), an election takes about one election timeout (1-2 s, more after a
# split vote), and the new leader is active once its first entry is committed.
CONTROLLER_WAIT_S = 15.0
# DESCRIBE_QUORUM's timeout per voter: it is answered at once, unless the voter is paused or overloaded.
PROBE_TIMEOUT_S = 1.0
RETRY_S = 0.2

Address = tuple[str, int]


@dataclass
class Voter:
    """A controller to ask: its id (None when only its address is known, as with --bootstrap-server)."""

    id: int | None
    host: str
    port: int
    pid: int | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class VoterView:
    """What one voter answered to DESCRIBE_QUORUM (``answered`` False: no answer in time)."""

    voter: Voter
    answered: bool
    error_code: int = 0
    leader_id: int = -1
    epoch: int = -1
    high_watermark: int = -1
    # At the leader: every voter's replica_id, log_end_offset, last_fetch_timestamp, last_caught_up_timestamp.
    voters: list[dict[str, Any]] = field(default_factory=list)
    # Every voter's address as the one asked knows it (DESCRIBE_QUORUM's nodes), from any voter.
    nodes: list[Voter] = field(default_factory=list)

    @property
    def is_leader(self) -> bool:
        return self.answered and self.error_code == Errors.NONE

    @property
    def in_quorum(self) -> bool:
        """Whether it answered as a voter of a quorum (a single controller or a broker does not serve 55)."""
        return self.answered and self.error_code in (Errors.NONE, Errors.NOT_LEADER_OR_FOLLOWER)


def voters_of(info: ClusterInfo) -> list[Voter]:
    return [Voter(c.id, c.host, c.port, c.pid) for c in info.controllers]


def voter_of(entry: ProcessEntry) -> Voter:
    return Voter(entry.id, entry.host, entry.port, entry.pid)


def _nodes(body: dict[str, Any]) -> list[Voter]:
    out: list[Voter] = []
    for node in body.get("nodes") or ():
        try:
            listener = node["listeners"][0]
            out.append(Voter(int(node["node_id"]), str(listener["host"]), int(listener["port"])))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


def with_nodes(voters: list[Voter], nodes: list[Voter]) -> list[Voter]:
    """``voters`` and the voters ``nodes`` adds (by address; an address without an id takes the node's)."""
    out = list(voters)
    by_address = {(v.host, v.port): i for i, v in enumerate(out)}
    for node in nodes:
        i = by_address.get((node.host, node.port))
        if i is None:
            by_address[(node.host, node.port)] = len(out)
            out.append(node)
        elif out[i].id is None:
            out[i] = Voter(node.id, out[i].host, out[i].port, out[i].pid)
    return out


def _partition(body: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return dict(body["topics"][0]["partitions"][0])
    except (KeyError, IndexError, TypeError):
        return None


async def describe_voter(voter: Voter, timeout: float = PROBE_TIMEOUT_S) -> VoterView:
    if voter.pid is not None and process_state(voter.pid) != "running":
        return VoterView(voter, answered=False)
    body = await ask(voter.host, voter.port, ApiKeys.DESCRIBE_QUORUM, {}, timeout)
    if body is None:
        return VoterView(voter, answered=False)
    part = _partition(body)
    if part is None:
        return VoterView(
            voter, answered=True, error_code=int(body.get("error_code", Errors.UNKNOWN_SERVER_ERROR))
        )
    return VoterView(
        voter,
        answered=True,
        error_code=int(part.get("error_code", 0)),
        leader_id=int(part.get("leader_id", -1)),
        epoch=int(part.get("leader_epoch", -1)),
        high_watermark=int(part.get("high_watermark", -1)),
        voters=list(part.get("current_voters") or []),
        nodes=_nodes(body),
    )


async def describe_quorum(voters: list[Voter], timeout: float = PROBE_TIMEOUT_S) -> list[VoterView]:
    """Every voter's DESCRIBE_QUORUM, asked at once; in the order of ``voters``."""
    views: list[VoterView | None] = [None] * len(voters)

    async def one(i: int, voter: Voter) -> None:
        views[i] = await describe_voter(voter, timeout)

    async with trio.open_nursery() as nursery:
        for i, voter in enumerate(voters):
            nursery.start_soon(one, i, voter)
    return [v for v in views if v is not None]


def leader_of(views: list[VoterView]) -> VoterView | None:
    """The voter that answers as the leader, the one of the highest epoch if two do (a deposed leader that
    has not heard of the new epoch yet)."""
    leaders = [v for v in views if v.is_leader]
    return max(leaders, key=lambda v: v.epoch) if leaders else None


def quorum_summary(views: list[VoterView]) -> str:
    """One line on why no active controller was found, for error messages."""
    parts = []
    for v in views:
        name = str(v.voter.id) if v.voter.id is not None else v.voter.address
        if not v.answered:
            parts.append(f"{name}: no answer")
        elif v.is_leader:
            parts.append(f"{name}: leader of epoch {v.epoch}")
        elif v.in_quorum:
            known = f"leader {v.leader_id}" if v.leader_id >= 0 else "no leader"
            parts.append(f"{name}: {known}, epoch {v.epoch}")
        else:
            parts.append(f"{name}: error {v.error_code}")
    return "; ".join(parts)


class NoActiveController(ClusterError):
    """No voter answered as the active controller within the wait; the message says what each said."""


async def all_down(voters: list[Voter]) -> str | None:
    """When no voter can answer (each one's process is not running, or nothing listens at its address),
    one line saying so; else None (one is up, or may be: paused, slow, or starting an election)."""
    stopped: list[str] = []
    silent: list[str] = []

    async def one(v: Voter) -> None:
        if v.pid is not None and process_state(v.pid) == "stopped":
            stopped.append(f"{v.id} ({v.address})")
        elif await is_listening(v.host, v.port, PROBE_TIMEOUT_S) is False:
            silent.append(v.address)

    async with trio.open_nursery() as nursery:
        for v in voters:
            nursery.start_soon(one, v)
    if len(stopped) + len(silent) < len(voters):
        return None
    who = "controller" if all(v.id is not None for v in voters) else "broker or controller"
    if not stopped:
        return nothing_listening(sorted(silent), who)
    parts = [f"controller(s) {', '.join(sorted(stopped))} not running"]
    if silent:
        parts.append(f"{NOTHING_LISTENING} at {', '.join(sorted(silent))}")
    return f"no {who} answered: {'; '.join(parts)}; {CLUSTER_HINT}"


async def ask_controller(
    voters: list[Voter],
    api_key: int,
    body: dict[str, Any],
    timeout: float = 10.0,
    wait_s: float = CONTROLLER_WAIT_S,
) -> tuple[dict[str, Any] | None, Voter]:
    """Sends one request to the active controller among ``voters`` and returns its answer and the voter that
    gave it. One address is asked directly (a single controller, a broker, which forwards what is the
    controller's, or the active voter): the answer None if it does not answer; if it answers NOT_CONTROLLER
    (41), the voters it names (DESCRIBE_QUORUM's nodes) are searched as a quorum is. A quorum: the leader is
    found with DESCRIBE_QUORUM (a voter the ones asked name and that was not given is asked too) and asked;
    on no leader, no answer or NOT_CONTROLLER the search starts again until ``wait_s`` has passed, then
    :class:`NoActiveController` is raised."""
    if len(voters) == 1:
        first = voters[0]
        resp = await ask(first.host, first.port, api_key, body, timeout)
        if resp is None or resp.get("error_code") != Errors.NOT_CONTROLLER:
            return resp, first
        view = await describe_voter(first)
        if not with_nodes(voters, view.nodes)[1:]:
            return resp, first  # no quorum to follow: the caller reports NOT_CONTROLLER
        voters = with_nodes(voters, view.nodes)
    deadline = time.monotonic() + wait_s
    problem = ""
    while True:
        views = await describe_quorum(voters)
        if not any(v.answered for v in views):
            down = await all_down(voters)
            if down is not None:
                raise NoActiveController(down)
        known = with_nodes(voters, [n for v in views for n in v.nodes])
        if len(known) > len(voters):
            voters = known  # the leader may be a voter that was not given: ask every one of them
            continue
        leader = leader_of(views)
        if leader is None and views and not any(v.in_quorum for v in views):
            answered = [v for v in views if v.answered]
            if answered:  # no quorum there (a single controller named twice): ask as before
                target = answered[0].voter
                return await ask(target.host, target.port, api_key, body, timeout), target
        if leader is not None:
            target = leader.voter
            resp = await ask(target.host, target.port, api_key, body, timeout)
            if resp is not None and resp.get("error_code") != Errors.NOT_CONTROLLER:
                return resp, target
            name = target.id if target.id is not None else target.address
            problem = (
                f"the quorum leader {name} did not answer"
                if resp is None
                else f"the quorum leader {name} is not active yet"
            )
        else:
            problem = "no quorum leader (" + quorum_summary(views) + ")"
        if time.monotonic() >= deadline:
            raise NoActiveController(
                f"no active controller among the voters {', '.join(v.address for v in voters)} "
                f"within {wait_s:.0f}s: {problem}"
            )
        await trio.sleep(RETRY_S)


async def find_active(voters: list[Voter], wait_s: float = CONTROLLER_WAIT_S) -> VoterView:
    """The voter that leads the quorum and acts as the active controller (it answers DESCRIBE_CLUSTER), within
    ``wait_s``; raises :class:`NoActiveController`."""
    deadline = time.monotonic() + wait_s
    while True:
        views = await describe_quorum(voters)
        leader = leader_of(views)
        if leader is not None:
            resp = await ask(
                leader.voter.host, leader.voter.port, ApiKeys.DESCRIBE_CLUSTER, {}, PROBE_TIMEOUT_S
            )
            if resp is not None and resp.get("error_code") != Errors.NOT_CONTROLLER:
                return leader
            problem = f"the quorum leader {leader.voter.id} is not active yet"
        else:
            problem = "no quorum leader (" + quorum_summary(views) + ")"
        if time.monotonic() >= deadline:
            raise NoActiveController(f"no active controller within {wait_s:.0f}s: {problem}")
        await trio.sleep(RETRY_S)


def ask_controller_sync(
    info: ClusterInfo,
    api_key: int,
    body: dict[str, Any],
    timeout: float = 2.0,
    wait_s: float = CONTROLLER_WAIT_S,
) -> dict[str, Any] | None:
    """:func:`ask_controller` to the cluster's controllers, from synchronous code; None when no controller
    answers (no active one within ``wait_s`` included)."""
    try:
        resp, _ = trio.run(ask_controller, voters_of(info), api_key, body, timeout, wait_s)
    except NoActiveController:
        return None
    return resp


__all__ = [
    "CONTROLLER_WAIT_S",
    "NoActiveController",
    "Voter",
    "VoterView",
    "all_down",
    "ask_controller",
    "ask_controller_sync",
    "describe_quorum",
    "find_active",
    "leader_of",
    "voters_of",
    "with_nodes",
]
