"""The KIP scenarios: KIP-101's lost write and divergence, KIP-279's divergence after leader changes in
quick succession. Replicas are named by role: ``a`` is the first leader, ``b`` the replica the controller
elects next, ``c`` the third (the partition's assignment order decides, as in the controller's elections)."""

from __future__ import annotations

from pathlib import Path

from lab.scenarios.base import PASS, Expectation, Scenario
from lab.scenarios.evidence import read_offset_checkpoint
from lab.scenarios.run import PARTITION, TOPIC, ScenarioError, ScenarioRun

BATCH = 10  # records per batch: every step produces whole batches of this size
# How often step 1 of the KIP-101 scenarios may try to take its state before it gives up.
HOLD_ATTEMPTS = 5

# Followers learn the high watermark from the next fetch response: after the last acknowledged batch, a
# follower's fetch at the new log end waits at the leader (replica.fetch.wait.max.ms, or new data) with the
# HW in its answer. The KIP-101 scenarios drop that answer (a one-way network partition, leader -> c) and
# keep it dropped: c's HW stays one batch behind its LEO for as long as the story needs, however slow the
# machine. The fetch wait only has to outlast the partition's installation (a poll), and is checked.
KIP101_SETTINGS = (
    "min.insync.replicas=2",
    "replica.fetch.wait.max.ms=5000",
    "replica.lag.time.max.ms=60000",
)


def _hold_hw_behind(run: ScenarioRun, a: int, c: int) -> int:
    """Acknowledges batches until ``c`` holds the last one but not the HW that covers it; returns the LEO.

    The state is held by a one-way partition a -> c put in place once the last batch is acknowledged (c's
    fetch at the new end is then waiting at a with the new HW). If c got that answer first, the partition
    is healed and one more batch tried, up to ``HOLD_ATTEMPTS`` times: the story never goes on without the
    state it needs."""
    run.produce(4 * BATCH)
    n = 4 * BATCH
    run.wait(f"every replica to hold {n} records and leader {a}'s HW {n}",
             lambda: run.hw(a) == n and all(run.leo(r) == n for r in run.replicas))  # fmt: skip
    for attempt in range(1, HOLD_ATTEMPTS + 1):
        run.produce(BATCH)
        n += BATCH
        run.drop_link(a, c)
        run.wait(f"{c} to hold {n} records", lambda end=n: run.leo(c) == end)
        if run.hw(c) < n:
            return n
        run.note(f"attempt {attempt}: {c} learnt HW {n} before the partition took; healing, one more batch")
        run.heal_links()
    raise ScenarioError(
        f"precondition: {c}'s HW should stay behind its LEO after the last acknowledgement; in "
        f"{HOLD_ATTEMPTS} attempts {c}'s fetch was answered before {a}'s messages to it were dropped"
    )


def _kip101_prelude(run: ScenarioRun) -> tuple[int, int, int, int]:
    """Steps 1-4 of both KIP-101 scenarios; returns (a, b, c, n) with n the LEO when the leader changes.

    1. a leads, b and c follow; batches are acknowledged (acks=all): every replica holds them, a's HW is
       at the end, and c's is held one batch behind (a's answers to c are dropped from then on).
    2. b is paused (SIGSTOP): it is still registered, so the controller may elect it.
    3. a stops cleanly: its controlled shutdown elects b (epoch 1); c becomes b's follower. Before KIP-101
       (`high-watermark`) c truncates to its HW here, dropping the last acknowledged batch; with leader
       epochs c asks b for the end of its epoch, and b does not answer.
    4. b misses its heartbeats and is fenced; c, the only live ISR member, is elected (epoch 2) with the log
       it has now. The partition a -> c is healed (a is down).
    """
    run.up()
    a, b, c = run.create_topic(3, {"min.insync.replicas": "2"})
    n = _hold_hw_behind(run, a, c)
    run.moment(
        f"1. batches acknowledged: leader {a}'s HW {n}; {c} holds them but its HW is one batch behind "
        f"({a}'s answers to {c} are dropped)"
    )
    run.pause(b)
    t_stop = run.now_ms()
    run.stop(a)
    run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") == b, after=t_stop,
                   what=f"the controlled shutdown of {a} to elect {b}")  # fmt: skip
    run.wait_event(c, "became_follower", lambda e: e.get("leader_id") == b, after=t_stop,
                   what=f"broker {c} to follow {b}")  # fmt: skip
    truncs = [e for e in run.events(c, "truncated") if e["ts_ms"] >= t_stop]
    run.moment(
        f"3. {a} stopped, {b} (paused) elected, {c} follows {b}"
        + (f": {c} truncated to {truncs[-1].get('truncate_to')}" if truncs else f": {c} has not truncated")
    )
    run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") == c, after=t_stop,
                   what=f"{b} to be fenced and {c} elected")  # fmt: skip
    run.wait(f"broker {c} to lead", lambda: (r := run.replica(c)) is not None and r["role"] == "leader")
    run.heal_links()
    run.moment(f"4. {b} fenced (paused); {c} leads epoch {run.leader_epoch()}: its log end is what is left")
    return a, b, c, n


class Kip101LostWrite(Scenario):
    name = "kip-101-lost-write"
    title = "KIP-101 scenario 1: high watermark truncation followed by immediate leader election"
    story = (
        "A follower that truncates its log to its own high watermark when it becomes a follower (Kafka "
        "before KIP-101) drops the last acknowledged batch, since followers learn the HW one fetch late. If "
        "it is then elected leader before it fetches that batch again, the write is lost on every replica. "
        "With leader epochs the follower asks the leader where its epoch ends and keeps the batch."
    )
    settings = KIP101_SETTINGS

    def expected(self, mode: str) -> Expectation:
        if mode == "high-watermark":
            return Expectation(
                "diverged",
                ("acked_not_lost", "log_matching"),
                "c truncates to its HW on becoming b's follower and is then elected: the last acknowledged "
                "batch is gone from c and b, new writes take its offsets, and a, whose log is now ahead of "
                "its leader's, halts with the batch (Kafka <= 2.0)",
            )
        return PASS

    def play(self, run: ScenarioRun) -> None:
        a, b, c, n = _kip101_prelude(run)
        run.resume(b)
        run.wait(f"{b} to rejoin the ISR", lambda: run.isr_is([b, c]), timeout=90)
        t = run.now_ms()
        run.start(a)
        halted = run.wait(
            f"{a} to rejoin the ISR (or to halt, its log being ahead of the leader's)",
            lambda: "halted" if run.exited(a) else ("rejoined" if run.isr_is([a, b, c]) else None),
            timeout=90,
        )
        if halted == "halted":
            stops = [e for e in run.events(a, "broker_stopped") if e["ts_ms"] >= t]
            why = stops[-1].get("reason", "") if stops else "no broker_stopped event"
            run.note(f"{a} exited: {why}")
            run.moment(
                f"5. {b} resumed and back in the ISR; {a} restarted and halted: its log ({n}) is ahead of "
                f"leader {c}'s (Kafka <= 2.0 stops rather than truncate below its HW)"
            )
        else:
            run.moment(f"5. {b} resumed and {a} restarted: both follow {c} and are back in the ISR")
        run.produce(3 * BATCH)
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment("6. new batches acknowledged; replicas converged")


class Kip101Divergence(Scenario):
    name = "kip-101-divergence"
    title = "KIP-101 scenario 2: replica divergence after a leader change and a restart"
    story = (
        "The same truncation to the high watermark, but this time the new leader takes new writes past the "
        "old leader's log end before the old leader comes back. The old leader truncates to its own HW (the "
        "end of its log), finds nothing out of range and fetches on from there: below the HW it keeps the "
        "batch the others replaced, and the logs diverge for good."
    )
    settings = KIP101_SETTINGS

    def expected(self, mode: str) -> Expectation:
        if mode == "high-watermark":
            return Expectation(
                "diverged",
                ("log_matching", "acked_not_lost"),
                "a keeps its epoch-0 batch where b and c hold an epoch-2 batch, below every HW",
            )
        return PASS

    def play(self, run: ScenarioRun) -> None:
        a, b, c, n = _kip101_prelude(run)
        run.resume(b)
        run.wait(f"{b} to rejoin the ISR", lambda: run.isr_is([b, c]), timeout=90)
        run.produce(3 * BATCH)
        run.wait(f"{c}'s log to pass {n}", lambda: run.leo(c) > n)
        run.moment(f"5. {b} back as {c}'s follower; new batches acknowledged, {c}'s log now ends past {n}")
        run.start(a)
        run.wait(f"{a} to rejoin the ISR", lambda: run.isr_is([a, b, c]), timeout=90)
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment(f"6. {a} restarted and back in the ISR; replicas converged (LEO and HW agree)")


class Kip279Divergence(Scenario):
    name = "kip-279-divergence"
    title = "KIP-279: divergence after leader changes in quick succession"
    story = (
        "A follower that comes back after two leader changes asks the leader where its own latest epoch "
        "ends. The leader never had that epoch: it answers with the end of the largest epoch it has below it "
        "(and, since KIP-279, that epoch's number). KIP-101 as first shipped truncates to that offset as is, "
        "which is past the point where the two logs part: the follower keeps a batch of an epoch the leader "
        "never had. KIP-279 looks the returned epoch up again in the follower's own cache and truncates "
        "where the logs really part. (The first leader change is clean: the follower stays in the ISR while "
        "a one-way partition keeps an acks=1 write from it; the second is unclean and costs nothing.)"
    )
    brokers = 2
    # The follower held off m2 must still be in the ISR when the leader dies: the leader would drop it after
    # replica.lag.time.max.ms behind, so that is set well past what the steps take on a loaded machine.
    settings = ("min.insync.replicas=1", "replica.lag.time.max.ms=300000")

    def expected(self, mode: str) -> Expectation:
        if mode == "leader-epoch":
            return PASS
        return Expectation(
            "diverged",
            ("log_matching",),
            "b keeps its epoch-1 batch at the offset where a holds its epoch-0 batch",
        )

    def play(self, run: ScenarioRun) -> None:
        run.up(brokers=2)
        a, b = run.create_topic(2, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"})
        run.produce(2 * BATCH, acks=1)
        x = 2 * BATCH
        run.wait(f"{b} to hold {x} records", lambda: run.leo(b) == x)
        run.wait(f"{b} to be in the ISR", lambda: run.isr_is([a, b]), timeout=90)
        run.moment(f"1. {a} leads epoch 0; both replicas hold {x} records")
        # A's answers to B are dropped from now on: m2 stays on A alone. B's fetches still reach A, and B,
        # at A's log end when m2 comes, stays in the ISR (replica.lag.time.max.ms is long here).
        run.drop_link(a, b)
        m2 = run.produce_to(a, BATCH, acks=1, timeout_ms=5000)
        if m2["error_code"] != 0:
            raise ScenarioError(f"{a} did not acknowledge m2 (acks=1): {m2}")
        run.say(f"m2: {BATCH} records acknowledged by {a} (acks=1) at {m2['base_offset']}, epoch 0")
        run.wait(f"{b} to stay at {x} with {a} at {x + BATCH}",
                 lambda: run.leo(a) == x + BATCH and run.leo(b) == x and run.isr_is([a, b]))  # fmt: skip
        run.moment(f"2. m2 on {a} only: {a}'s answers to {b} are dropped; both in the ISR")
        t = run.now_ms()
        run.kill(a)
        run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") == b, after=t,
                       what=f"{a} to be fenced and {b}, in the ISR, elected")  # fmt: skip
        run.wait(f"broker {b} to lead", lambda: (r := run.replica(b)) is not None and r["role"] == "leader")
        run.heal_links()
        run.produce(BATCH, acks=1)
        run.say(f"m3: {BATCH} records acknowledged by {b} (acks=1) at {x}, epoch {run.leader_epoch()}")
        hw_file = Path(run.broker(b).data_dir) / "replication-offset-checkpoint"
        run.wait(f"{b}'s HW checkpoint to reach {x + BATCH}",
                 lambda: (read_offset_checkpoint(hw_file, TOPIC, PARTITION) or 0) >= x + BATCH)  # fmt: skip
        run.moment(f"3. {a} killed; {b} elected (clean: it was in the ISR) wrote m3 where {a} has m2")
        run.kill(b)
        t = run.now_ms()
        run.start(a)
        run.wait_event("controller", "leader_elected", lambda e: e.get("leader_id") == a, after=t,
                       what=f"{a} to be elected (uncleanly: the ISR is [{b}], which is down)")  # fmt: skip
        run.wait(f"broker {a} to lead", lambda: (r := run.replica(a)) is not None and r["role"] == "leader")
        run.produce(BATCH, acks=1)
        run.moment(
            f"4. {b} killed, {a} restarted and elected uncleanly (epoch {run.leader_epoch()}); m4 written"
        )
        run.start(b)
        run.wait(f"{b} to rejoin the ISR", lambda: run.isr_is([a, b]), timeout=90)
        truncs = [e for e in run.events(b, "truncated") if e["ts_ms"] >= t]
        if truncs:
            run.note(f"{b} truncated to {truncs[-1].get('truncate_to')} ({truncs[-1].get('reason')})")
        else:
            run.note(f"{b} did not truncate: it kept m3 at {x}")
        run.wait("the replicas to converge", run.converged, timeout=90)
        run.moment(f"5. {b} restarted as {a}'s follower and back in the ISR; replicas converged")
