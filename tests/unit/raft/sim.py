"""A simulated quorum of ``KafkaRaftClient`` voters: an in-memory network whose messages are delivered,
dropped or held in any order the test picks, crashes (a voter restarts from its quorum-state store and
its flushed log), partitions, and one fake clock. Raft's safety properties are checked after every step.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from raft import messages as rm
from raft.election_state import MemoryQuorumStateStore
from raft.epoch_states import LeaderState
from raft.quorum_state import QuorumConfig
from raft.raft_client import KafkaRaftClient
from raft.raft_log import MemoryRaftLog

CONFIG = QuorumConfig(
    election_timeout_ms=100,
    fetch_timeout_ms=200,
    election_backoff_max_ms=100,
    request_timeout_ms=150,
    retry_backoff_ms=10,
    fetch_max_wait_ms=0,
)


@dataclass(slots=True)
class Message:
    source: int
    destination: int
    payload: rm.RaftRequest | rm.RaftResponse

    @property
    def is_request(self) -> bool:
        return isinstance(
            self.payload,
            (rm.VoteRequest, rm.BeginQuorumEpochRequest, rm.EndQuorumEpochRequest, rm.FetchRequest),
        )


@dataclass(slots=True)
class Node:
    node_id: int
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    client: KafkaRaftClient | None = None


class Cluster:
    def __init__(self, size: int, seed: int = 0, config: QuorumConfig = CONFIG) -> None:
        self.ids = [1000 + i for i in range(size)]
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self.nodes = {i: Node(i) for i in self.ids}
        self.network: list[Message] = []
        self.cut: set[tuple[int, int]] = set()
        # Safety bookkeeping.
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes | None]] = {}
        # The epoch of the voter that first showed each committed offset: every leader of that epoch or a
        # later one has the entry (Raft's leader completeness); an older, deposed leader may not.
        self.commit_epoch: dict[int, int] = {}
        self.appended = 0
        self.checked: dict[int, int] = {}
        for i in self.ids:
            self.start(i)

    # ------------------------------------------------------------------------------------ nodes

    def start(self, node_id: int) -> None:
        node = self.nodes[node_id]
        self.checked[node_id] = 0
        node.client = KafkaRaftClient(
            node_id,
            self.ids,
            node.log,
            node.store,
            self.config,
            now_ms=self.now,
            rng=random.Random(self.rng.random()),
        )
        self._collect(node_id)

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.client is None:
            return
        node.client = None
        node.log.crash()
        self.network = [m for m in self.network if node_id not in (m.source, m.destination)]

    def alive(self) -> list[int]:
        return [i for i in self.ids if self.nodes[i].client is not None]

    def client(self, node_id: int) -> KafkaRaftClient:
        client = self.nodes[node_id].client
        assert client is not None
        return client

    def _collect(self, node_id: int) -> None:
        for out in self.client(node_id).drain().sends:
            self.network.append(Message(node_id, out.destination, out.request))
        self.check()

    # ------------------------------------------------------------------------------------ steps

    def tick(self, ms: int) -> None:
        self.now += ms
        for i in self.alive():
            self.client(i).poll(self.now)
            self._collect(i)

    def linked(self, a: int, b: int) -> bool:
        return (a, b) not in self.cut

    def deliver(self, index: int) -> None:
        if not self.network:
            return
        message = self.network.pop(index % len(self.network))
        if not self.linked(message.source, message.destination):
            return
        target = self.nodes[message.destination].client
        if target is None:
            return
        if message.is_request:
            response = target.handle_request(message.source, message.payload, self.now)  # type: ignore[arg-type]
            self.network.append(Message(message.destination, message.source, response))
        else:
            target.handle_response(message.source, message.payload, self.now)  # type: ignore[arg-type]
        self._collect(message.destination)

    def drop(self, index: int) -> None:
        if self.network:
            self.network.pop(index % len(self.network))

    def append(self, node_id: int) -> None:
        client = self.nodes[node_id].client
        if client is not None and client.is_leader():
            self.appended += 1
            client.append([f"v{self.appended}".encode()], self.now)
            self._collect(node_id)

    def partition(self, group: set[int]) -> None:
        """Cut every link between ``group`` and the rest, both ways."""
        for a in self.ids:
            for b in self.ids:
                if (a in group) != (b in group):
                    self.cut.add((a, b))

    def heal(self) -> None:
        self.cut.clear()

    def run(self, rounds: int, tick_ms: int = 20) -> None:
        """Everything delivered in order, the clock moving: the quorum should settle."""
        for _ in range(rounds):
            self.tick(tick_ms)
            for _ in range(4 * len(self.network) + 1):
                if not self.network:
                    break
                self.deliver(0)

    def shuffle(self, steps: int, drop_percent: int) -> None:
        """``steps`` random deliveries (any message first), drops and small clock moves."""
        for _ in range(steps):
            roll = self.rng.randrange(100)
            if roll < 10:
                self.tick(self.rng.randint(1, 60))
            elif roll < 10 + drop_percent:
                self.drop(self.rng.randrange(1 << 16))
            else:
                self.deliver(self.rng.randrange(1 << 16))

    # ------------------------------------------------------------------------------------ safety

    def check(self) -> None:
        for i in self.alive():
            client = self.client(i)
            state = client.quorum.state
            if isinstance(state, LeaderState):
                seen = self.leaders.setdefault(state.epoch, i)
                assert seen == i, f"two leaders in epoch {state.epoch}: {seen} and {i}"
        for i in self.alive():
            client = self.client(i)
            entries = self.nodes[i].log.entries()
            for offset, epoch, value in entries[self.checked[i] : client.high_watermark]:
                self.commit_epoch.setdefault(offset, client.epoch)
                known = self.committed.setdefault(offset, (epoch, value))
                assert known == (epoch, value), (
                    f"node {i} committed ({epoch}, {value!r}) at {offset}, but ({known}) was committed there"
                )
            self.checked[i] = max(self.checked[i], client.high_watermark)
        for i in self.alive():
            if self.client(i).is_leader():
                entries = self.nodes[i].log.entries()
                leader_epoch = self.client(i).epoch
                for offset, (epoch, value) in self.committed.items():
                    if self.commit_epoch[offset] > leader_epoch:
                        continue
                    assert offset < len(entries), f"leader {i} lacks committed offset {offset}"
                    assert entries[offset][1:] == (epoch, value), f"leader {i} differs at committed {offset}"

    def check_log_matching(self) -> None:
        logs = {i: self.nodes[i].log.entries() for i in self.ids}
        for a in self.ids:
            for b in self.ids:
                if a >= b:
                    continue
                la, lb = logs[a], logs[b]
                common = min(len(la), len(lb))
                last_match = -1
                for offset in range(common):
                    if la[offset][1] == lb[offset][1]:
                        last_match = offset
                assert la[: last_match + 1] == lb[: last_match + 1], f"logs of {a} and {b} break log matching"
