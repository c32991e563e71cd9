"""Kafka's stories of a leader that cannot be reached: a zombie (paused) leader, a slow follower, an
isolated leader; and of answers that do not reach the producer (duplicates, KIP-98). Under every truncation
mode the report passes: these are the protections that hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from lab.scenarios.base import Scenario
from lab.scenarios.kips import BATCH
from lab.scenarios.run import PARTITION, TOPIC, ScenarioError, ScenarioRun

FAULT_SETTINGS = ("min.insync.replicas=2", "replica.lag.time.max.ms=2000")


class ZombieLeader(Scenario):
    name = "zombie-leader"
    title = "A zombie leader: paused, replaced, then woken with requests in its socket"
    story = (
        "A leader stops answering (a long GC pause, here SIGSTOP) but keeps its sockets. The controller "
        "fences it and elects another ISR member. When it wakes it still believes it leads the old epoch and "
        "serves what is waiting in its sockets: it can acknowledge an acks=1 write alone, never an acks=all "
        "one (its followers now fetch from the new leader, and the controller refuses its ISR changes). When "
        "it learns the new epoch it truncates what it wrote alone and follows."
    )
    settings = FAULT_SETTINGS

    def play(self, run: ScenarioRun) -> None:
        run.up()
        a, b, c = run.create_topic(3, {"min.insync.replicas": "2"})
        run.produce(5 * BATCH)
        n = 5 * BATCH
        run.wait("every replica to hold the batches", lambda: all(run.leo(x) == n for x in (a, b, c)))
        run.moment(f"1. {a} leads epoch 0; {n} records acknowledged (acks=all)")
        run.pause(a)
        t = run.now_ms()
        run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") == b, after=t,
                       what=f"{a} to be fenced and {b} elected")  # fmt: skip
        run.wait(f"broker {b} to lead", lambda: (r := run.replica(b)) is not None and r["role"] == "leader")
        run.produce(3 * BATCH)
        run.moment(
            f"2. {a} paused and fenced; {b} leads epoch {run.leader_epoch()}; 3 more batches acknowledged"
        )
        all_resp, one_resp = trio.run(_zombie_writes, run, a)
        run.note(f"zombie {a}, acks=all: {_answer(all_resp)} (it must not be acknowledged)")
        run.note(f"zombie {a}, acks=1: {_answer(one_resp)}")
        if all_resp.get("error_code") == 0:
            raise ScenarioError(f"the zombie leader {a} acknowledged an acks=all write: {all_resp}")
        run.wait_event(a, "became_follower", lambda e: e.get("leader_id") == b, after=t,
                       what=f"{a} to learn the new epoch and follow {b}")  # fmt: skip
        run.wait("the replicas to converge", run.converged, timeout=90)
        truncs = [e for e in run.events(a, "truncated") if e["ts_ms"] >= t]
        for e in truncs:
            run.note(f"{a} truncated to {e.get('truncate_to')} ({e.get('reason')})")
        run.moment(f"3. {a} follows {b}, truncated what it wrote alone, back in the ISR; converged")


async def _zombie_writes(run: ScenarioRun, broker: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sends an acks=all and an acks=1 PRODUCE to the paused ``broker`` (the bytes wait in its socket, as
    a client with stale metadata would leave them), then resumes it; returns both answers."""
    from protocol import ApiKeys, ConnectionClosed, build_simple_batch, open_connection, read_header

    entry = run.broker(broker)
    out: dict[int, dict[str, Any]] = {}

    async def send(acks: int) -> None:
        values = [f"zombie-{broker}-acks{acks}-{i}".encode() for i in range(BATCH)]
        batch = build_simple_batch(values)
        body = {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": PARTITION, "records": batch}]}],
        }
        t0 = run.now_ms()
        try:
            async with open_connection(entry.host, entry.port, client_id=f"zombie-acks{acks}") as conn:
                resp = await conn.request(ApiKeys.PRODUCE, body, timeout=20)
            part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
        except (OSError, trio.TooSlowError, ConnectionClosed) as exc:  # no answer: not acknowledged
            part = {"error_code": -1, "base_offset": -1, "error_message": type(exc).__name__}
        if part.get("error_code") == 0:
            run.journal.acked((TOPIC, PARTITION), part["base_offset"], part["base_offset"] + BATCH - 1,
                              read_header(batch).crc, acks, t0, run.now_ms())  # fmt: skip
        out[acks] = part

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send, -1)
        nursery.start_soon(send, 1)
        # Both requests are written (the kernel takes the bytes for the paused process) once every task
        # waits for an answer.
        await trio.testing.wait_all_tasks_blocked(cushion=0.05)
        run.resume(broker)
    return out[-1], out[1]


def _answer(part: dict[str, Any]) -> str:
    code = part.get("error_code")
    if code == 0:
        return f"acknowledged at offset {part.get('base_offset')}"
    if code == -1:
        return f"no answer ({part.get('error_message', 'timeout')})"
    from protocol import error_name

    return f"refused: {error_name(int(code or 0))}"


class SlowFollower(Scenario):
    name = "slow-follower"
    title = "A slow follower: a delayed link takes it out of the ISR, healing brings it back"
    story = (
        "A follower's link to its leader is slow: its fetches arrive later than replica.lag.time.max.ms, the "
        "leader shrinks the ISR (ALTER_PARTITION) and acks=all writes carry on with the others, as long as "
        "min.insync.replicas holds. When the link heals the follower catches up and the leader adds it back."
    )
    settings = FAULT_SETTINGS
    needs_net = True

    def play(self, run: ScenarioRun) -> None:
        run.up()
        a, b, c = run.create_topic(3, {"min.insync.replicas": "2"})
        run.produce(3 * BATCH)
        run.moment(f"1. {a} leads; ISR {run.isr()}")
        t = run.now_ms()
        run.net("delay", str(a), str(c), "--ms", "3000")

        def shrunk() -> bool:
            run.produce(BATCH)
            return run.isr_is([a, b])

        run.wait(f"{a} to drop {c} from the ISR", shrunk, timeout=90)
        run.moment(
            f"2. link {a}<->{c} delayed 3000 ms: {c} fell behind and left the ISR; acks=all carries on"
        )
        run.net("heal")
        run.produce(3 * BATCH)
        run.wait(f"{c} to rejoin the ISR", lambda: run.isr_is([a, b, c]), timeout=90)
        expands = [e for e in run.events("controller", "isr_changed") if e["ts_ms"] >= t]
        for e in expands:
            run.note(f"ISR {e.get('isr')} ({e.get('reason')})")
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment(f"3. healed: {c} caught up and is back in the ISR; converged")


class IsolatedLeader(Scenario):
    name = "isolated-leader"
    title = (
        "An isolated leader cannot acknowledge acks=all; a new leader is elected; it truncates and rejoins"
    )
    story = (
        "The leader is cut off from its followers, then from everyone. A write it appended alone cannot be "
        "acknowledged with acks=all (no follower can fetch it); the controller stops hearing from it, fences "
        "it and elects a follower. After the heal the old leader learns the new epoch, truncates the batch "
        "nobody else has, and rejoins as a follower."
    )
    # A dropped request is only noticed when it times out: short timeouts make the recovery after the heal
    # take seconds rather than half a minute.
    settings = (
        "min.insync.replicas=2",
        "replica.lag.time.max.ms=20000",
        "request.timeout.ms=5000",
        "replica.socket.timeout.ms=5000",
        "controller.socket.timeout.ms=5000",
    )
    needs_net = True

    def play(self, run: ScenarioRun) -> None:
        run.up()
        a, b, c = run.create_topic(3, {"min.insync.replicas": "2"})
        run.produce(5 * BATCH)
        n = 5 * BATCH
        run.wait("every replica to hold the batches", lambda: all(run.leo(x) == n for x in (a, b, c)))
        run.moment(f"1. {a} leads epoch 0; {n} records acknowledged")
        run.net("partition", str(a), str(b))
        run.net("partition", str(a), str(c))
        resp = run.produce_to(a, BATCH, acks=-1, timeout_ms=3000)
        run.note(f"acks=all write to the cut-off leader {a}: {_answer(resp)}")
        if resp.get("error_code") == 0:
            raise ScenarioError(f"the cut-off leader {a} acknowledged an acks=all write: {resp}")
        run.moment(f"2. {a} cut off from {b} and {c}: it appended a batch alone, unacknowledged")
        t = run.now_ms()
        run.net("isolate", str(a))
        run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") in (b, c), after=t,
                       what=f"{a} to be fenced and a follower elected")  # fmt: skip
        new = run.leader()
        run.produce(3 * BATCH, via=[b, c])
        run.moment(f"3. {a} isolated and fenced; {new} leads epoch {run.leader_epoch()}; writes carry on")
        run.net("heal")
        run.wait_event(a, "became_follower", after=t, what=f"{a} to follow the new leader")
        run.wait(f"{a} to rejoin the ISR", lambda: run.isr_is([a, b, c]), timeout=90)
        for e in [e for e in run.events(a, "truncated") if e["ts_ms"] >= t]:
            run.note(f"{a} truncated to {e.get('truncate_to')} ({e.get('reason')})")
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment(f"4. healed: {a} truncated its lone batch, follows {new}, back in the ISR; converged")


class Duplicates(Scenario):
    name = "duplicates"
    title = "Lost answers: a retrying producer writes a batch twice, an idempotent one once (KIP-98)"
    story = (
        "The leader's answers to its clients are lost 30 % of the time (`isrsim net loss <leader> clients "
        "--percent 30 --one-way`): each PRODUCE is appended, replicated and committed, and only the answer "
        "is dropped. The producer times out or sees a later answer first, and sends the batch again. Without "
        "idempotence the leader appends it a second time. An idempotent producer (INIT_PRODUCER_ID, then a "
        "producer id, epoch and sequence on every batch) sends the same numbers again, and the leader, which "
        "keeps each producer's last five batches, answers the retry with the offsets of the first write. The "
        "same workload runs twice into one partition: once with --no-idempotence (duplicates, which the "
        "report counts and shows but does not fail: Kafka promises nothing more without idempotence), once "
        "idempotent (none)."
    )
    settings = (*FAULT_SETTINGS, "request.timeout.ms=5000")
    needs_net = True
    records = 400

    def play(self, run: ScenarioRun) -> None:
        run.up()
        a = run.create_topic(3, {"min.insync.replicas": "2"})[0]
        run.net("loss", str(a), "clients", "--percent", "30", "--one-way", "--seed", "7")
        run.moment(f"1. {a} leads; 30 % of its answers to clients are lost (the requests take effect)")
        # Five batches in flight, as Kafka's producers: a lost answer is noticed when a later one arrives.
        common: dict[str, Any] = {"max_in_flight": 5, "request_timeout_ms": 1000}
        plain = run.produce(self.records, idempotence=False, label="plain", **common)
        run.note(f"without idempotence: {plain.retries} retries")
        idem = run.produce(self.records, idempotence=True, label="idempotent", **common)
        run.note(f"idempotent: {idem.retries} retries")
        run.net("heal")
        run.wait("the replicas to converge", run.converged, timeout=90)
        counts = _copies(run, a)
        twice = {label: sum(1 for n in seen.values() if n > 1) for label, seen in counts.items()}
        run.note(
            f"without idempotence: {twice.get('plain', 0)} of {self.records} records written more than once; "
            f"idempotent: {twice.get('idempotent', 0)}"
        )
        if twice.get("idempotent", 0):
            raise ScenarioError(f"the idempotent producer wrote {twice['idempotent']} records twice")
        for label, seen in counts.items():
            if len(seen) != self.records:
                raise ScenarioError(f"{label}: {len(seen)} distinct records on {a}, expected {self.records}")
        run.moment(
            f"2. healed; {twice.get('plain', 0)} records twice without idempotence, none with it; converged"
        )


def _copies(run: ScenarioRun, broker: int) -> dict[str, dict[int, int]]:
    """Per workload (the label in the values ``<id>-<label>:<seq>:``): how often each record is in the
    partition's log on ``broker``."""
    from protocol import decode_records, iter_batches

    directory = Path(run.broker(broker).data_dir) / f"{TOPIC}-{PARTITION}"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    out: dict[str, dict[int, int]] = {}
    for pos, _ in iter_batches(data):
        for record in decode_records(data, pos)[1]:
            head, _, rest = (record.value or b"").partition(b":")
            label = head.decode(errors="replace").rsplit("-", 1)[-1]
            seq = int(rest.split(b":", 1)[0])
            seen = out.setdefault(label, {})
            seen[seq] = seen.get(seq, 0) + 1
    return out
