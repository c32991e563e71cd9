"""``hanging-transaction`` (KIP-890): a late transactional write after an abort, under
``transaction.partition.verification.enable`` true (Kafka since 3.6) and false (the legacy mode).

The script speaks the transaction protocol itself (FindCoordinator, InitProducerId, AddPartitionsToTxn,
transactional PRODUCE, EndTxn), as a Kafka producer does, so that the late write is exactly the one of the
story: a batch of the aborted transaction, with the producer's id, epoch and next sequence, that reaches
the leader after the abort's marker (a retry delayed in the network)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from kit.cluster_client import ClientError, ClusterClient
from kit.processes import process_state
from kit.producer import now_ms
from lab.scenarios.base import PASS, Expectation, Scenario
from lab.scenarios.run import PARTITION, TOPIC, ScenarioError, ScenarioRun
from protocol import (
    ApiKeys,
    ConnectionClosed,
    Errors,
    build_simple_batch,
    error_name,
    read_header,
)

TXN_ID = "hanging-txn"
VERIFICATION_KEY = "transaction.partition.verification.enable"
MAX_TIMEOUT_MS = 6000
CLEANUP_INTERVAL_MS = 1000
TRANSACTIONAL = 0x10  # the batch attributes' transactional bit
RETRY = {
    Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.COORDINATOR_LOAD_IN_PROGRESS,
    Errors.NOT_COORDINATOR,
    Errors.CONCURRENT_TRANSACTIONS,
    Errors.NOT_LEADER_OR_FOLLOWER,
    Errors.NOT_ENOUGH_REPLICAS,
    Errors.LEADER_NOT_AVAILABLE,
    Errors.UNKNOWN_TOPIC_OR_PARTITION,
}
HANGING = Expectation(
    "consistent",
    ("no_hanging_transactions",),
    why="without verification the late write opens a transaction no coordinator knows of",
)


@dataclass
class Producer:
    """A transactional producer's identity and its next sequence on the partition."""

    producer_id: int
    epoch: int
    sequence: int = 0


class HangingTransaction(Scenario):
    name = "hanging-transaction"
    title = "A late write after an abort: a transaction that never ends (KIP-890)"
    story = (
        "A transactional producer commits one transaction, then writes a batch in a second one and aborts "
        "it; the coordinator writes the ABORT marker. A batch of the aborted transaction that was delayed "
        "in the network then reaches the leader. Before KIP-890 the leader checks nothing: the batch opens "
        "a new transaction on the partition that no coordinator knows of, so no marker will ever end it, "
        "the last stable offset stops there and read_committed consumers stop with it. With verification "
        "(transaction.partition.verification.enable=true, Kafka's default since 3.6) the leader first asks "
        "the coordinator (AddPartitionsToTxn v4 verify_only) whether the partition is in the producer's "
        "ongoing transaction; it is not, and the write is refused with INVALID_TXN_STATE."
    )
    about_verification = True
    settings = (
        "transaction.state.log.num.partitions=1",
        "offsets.topic.num.partitions=1",
        f"transaction.max.timeout.ms={MAX_TIMEOUT_MS}",
        f"transaction.abort.timed.out.transaction.cleanup.interval.ms={CLEANUP_INTERVAL_MS}",
    )

    def expected_under(self, mode: str, verification: bool) -> Expectation:
        return PASS if verification else HANGING

    def play(self, run: ScenarioRun) -> None:
        legacy = any(s == f"{VERIFICATION_KEY}=false" for s in run.settings)
        run.up()
        leader = run.create_topic(3, {"min.insync.replicas": "2"})[0]
        run.moment(f"1. {leader} leads {TOPIC}-{PARTITION}; verification {'off' if legacy else 'on'}")
        bootstrap = [(b.host, b.port) for b in run.cluster.brokers if process_state(b.pid) == "running"]
        coordinator, p = self._with_client(run, bootstrap, self._commit_then_abort, leader)
        run.moment("2. after the abort")
        # The late write: the aborted transaction's next batch, delayed in the network.
        if legacy:
            offset = self._with_client(run, bootstrap, self._late_write_hangs, leader, coordinator, p)
            run.moment(f"3. the late batch's transaction hangs: the LSO stays at {offset}")
        else:
            lso = self._with_client(run, bootstrap, self._late_write_refused, leader, p)
            hw = run.hw(leader)
            if lso != hw:
                raise ScenarioError(f"the LSO is {lso} but the high watermark {hw}: a transaction is open")
            run.moment(f"3. the late batch is refused; LSO = HW = {hw}")

    def _with_client(self, run: ScenarioRun, bootstrap: list[tuple[str, int]], step: Any, *args: Any) -> Any:
        """``step(run, client, *args)`` in a trio run of its own, with a client of the cluster."""

        async def main() -> Any:
            async with trio.open_nursery() as nursery:
                client = ClusterClient(nursery, bootstrap, client_id="scenario-txn")
                try:
                    await client.refresh_metadata()
                    return await step(run, client, *args)
                finally:
                    await client.aclose()
                    nursery.cancel_scope.cancel()

        try:
            return trio.run(main)
        except BaseExceptionGroup as group:
            scenario_errors, _ = group.split(ScenarioError)
            while isinstance(scenario_errors, BaseExceptionGroup):
                scenario_errors = scenario_errors.exceptions[0]
            if scenario_errors is not None:
                raise scenario_errors from None
            raise ScenarioError(f"the transactional producer failed: {group!r}") from group
        except (ClientError, OSError, trio.TooSlowError, ConnectionClosed) as exc:
            raise ScenarioError(f"the transactional producer failed: {exc!r}") from exc

    async def _commit_then_abort(
        self, run: ScenarioRun, client: ClusterClient, leader: int
    ) -> tuple[int, Producer]:
        coordinator = await _coordinator(client)
        run.say(f"transactional id {TXN_ID!r}: coordinator broker {coordinator}")
        init = await _until_ok(
            client,
            coordinator,
            ApiKeys.INIT_PRODUCER_ID,
            {"transactional_id": TXN_ID, "transaction_timeout_ms": MAX_TIMEOUT_MS - 1000},
            0,
        )
        p = Producer(int(init["producer_id"]), int(init["producer_epoch"]))
        run.note(f"InitProducerId: producer {p.producer_id}, epoch {p.epoch}")
        await _add_partition(client, coordinator, p)
        await self._produce(run, client, leader, p, "committed", expect=Errors.NONE)
        await _until_ok(client, coordinator, ApiKeys.END_TXN, _end(p, commit=True), 3)
        run.note("transaction 1 committed")
        await _add_partition(client, coordinator, p)
        await self._produce(run, client, leader, p, "aborted", expect=Errors.NONE)
        await _until_ok(client, coordinator, ApiKeys.END_TXN, _end(p, commit=False), 3)
        await _wait_state(client, coordinator, "CompleteAbort")
        await _wait_no_open_transaction(client, leader)
        run.note("transaction 2 aborted: the ABORT marker is written, the partition has no open transaction")
        return coordinator, p

    async def _late_write_hangs(
        self, run: ScenarioRun, client: ClusterClient, leader: int, coordinator: int, p: Producer
    ) -> int:
        offset = await self._produce(run, client, leader, p, "late", expect=Errors.NONE)
        run.note(f"the late batch is appended at offset {offset}: it opens a transaction")
        stray_ms = now_ms()
        held_ms = MAX_TIMEOUT_MS + CLEANUP_INTERVAL_MS + 1000
        while now_ms() - stray_ms < held_ms:
            lso = await _last_stable_offset(client, leader)
            if lso != offset:
                raise ScenarioError(f"the LSO is {lso}, expected it held at {offset} by the late batch")
            await trio.sleep(0.5)
        state = await _describe(client, coordinator)
        run.note(
            f"{held_ms} ms later the LSO is still {offset} and the coordinator says {state}: "
            "nobody will end this transaction"
        )
        return offset

    async def _late_write_refused(
        self, run: ScenarioRun, client: ClusterClient, leader: int, p: Producer
    ) -> int:
        await self._produce(run, client, leader, p, "late", expect=Errors.INVALID_TXN_STATE)
        run.note("the late batch is refused with INVALID_TXN_STATE: nothing is written")
        return await _last_stable_offset(client, leader)

    async def _produce(
        self, run: ScenarioRun, client: ClusterClient, leader: int, p: Producer, label: str, *, expect: Errors
    ) -> int:
        values = [f"{label}-{i}".encode() for i in range(5)]
        batch = build_simple_batch(
            values,
            producer_id=p.producer_id,
            producer_epoch=p.epoch,
            base_sequence=p.sequence,
            attributes=TRANSACTIONAL,
        )
        body = {
            "transactional_id": TXN_ID,
            "acks": -1,
            "timeout_ms": 10_000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": PARTITION, "records": batch}]}],
        }
        sent = now_ms()
        conn = await client.broker_connection(leader)
        resp = await conn.request(ApiKeys.PRODUCE, body, timeout=20)
        part: dict[str, Any] = resp["responses"][0]["partition_responses"][0]
        error = Errors(part["error_code"])
        run.say(f"PRODUCE {label} batch (sequence {p.sequence}): {error_name(error)}")
        if error != expect:
            raise ScenarioError(
                f"the {label} batch was answered {error_name(error)} "
                f"({part.get('error_message') or ''}), expected {error_name(expect)}"
            )
        if error == Errors.NONE:
            p.sequence += len(values)
            base = int(part["base_offset"])
            run.journal.acked(
                (TOPIC, PARTITION), base, base + len(values) - 1, read_header(batch).crc, -1, sent, now_ms()
            )
            return base
        return -1


def _end(p: Producer, *, commit: bool) -> dict[str, Any]:
    return {
        "transactional_id": TXN_ID,
        "producer_id": p.producer_id,
        "producer_epoch": p.epoch,
        "committed": commit,
    }


async def _request(
    client: ClusterClient, broker: int, api: ApiKeys, body: dict[str, Any], version: int
) -> Any:
    conn = await client.broker_connection(broker)
    return await conn.request(api, body, api_version=version, timeout=10)


async def _until_ok(
    client: ClusterClient, broker: int, api: ApiKeys, body: dict[str, Any], version: int
) -> dict[str, Any]:
    """The request again while its error is retriable (the coordinator loading, a marker in flight)."""
    with trio.fail_after(60):
        while True:
            resp: dict[str, Any] = await _request(client, broker, api, body, version)
            error = Errors(resp.get("error_code", 0))
            if error == Errors.NONE:
                return resp
            if error not in RETRY:
                raise ScenarioError(f"{api.name} was answered {error_name(error)}")
            await trio.sleep(0.2)


async def _coordinator(client: ClusterClient) -> int:
    body = {"key": TXN_ID, "key_type": 1}
    with trio.fail_after(60):
        while True:
            await client.refresh_metadata()
            for broker in sorted(client.brokers):
                try:
                    resp = await _request(client, broker, ApiKeys.FIND_COORDINATOR, body, 1)
                except (OSError, trio.TooSlowError, ConnectionClosed):
                    continue
                if resp["error_code"] == 0:
                    return int(resp["node_id"])
                break
            await trio.sleep(0.2)


async def _add_partition(client: ClusterClient, coordinator: int, p: Producer) -> None:
    body = {
        "v3_and_below_transactional_id": TXN_ID,
        "v3_and_below_producer_id": p.producer_id,
        "v3_and_below_producer_epoch": p.epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": [PARTITION]}],
    }
    with trio.fail_after(60):
        while True:
            resp = await _request(client, coordinator, ApiKeys.ADD_PARTITIONS_TO_TXN, body, 3)
            codes = [
                Errors(r["partition_error_code"])
                for t in resp["results_by_topic_v3_and_below"]
                for r in t["results_by_partition"]
            ]
            if all(c == Errors.NONE for c in codes):
                return
            if not all(c in RETRY for c in codes if c != Errors.NONE):
                raise ScenarioError(f"AddPartitionsToTxn was answered {[error_name(c) for c in codes]}")
            await trio.sleep(0.2)


async def _describe(client: ClusterClient, coordinator: int) -> str:
    resp = await _request(
        client, coordinator, ApiKeys.DESCRIBE_TRANSACTIONS, {"transactional_ids": [TXN_ID]}, 0
    )
    return str(resp["transaction_states"][0]["transaction_state"])


async def _wait_state(client: ClusterClient, coordinator: int, state: str) -> None:
    with trio.fail_after(60):
        while await _describe(client, coordinator) != state:
            await trio.sleep(0.2)


async def _wait_no_open_transaction(client: ClusterClient, leader: int) -> None:
    body = {"topics": [{"name": TOPIC, "partition_indexes": [PARTITION]}]}
    with trio.fail_after(60):
        while True:
            resp = await _request(client, leader, ApiKeys.DESCRIBE_PRODUCERS, body, 0)
            producers = resp["topics"][0]["partitions"][0]["active_producers"]
            if all(x["current_txn_start_offset"] == -1 for x in producers):
                return
            await trio.sleep(0.2)


async def _last_stable_offset(client: ClusterClient, leader: int) -> int:
    """ListOffsets at read_committed (isolation_level 1) for the latest offset: the LSO."""
    body = {
        "replica_id": -1,
        "isolation_level": 1,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": PARTITION, "timestamp": -1}]}],
    }
    resp = await _request(client, leader, ApiKeys.LIST_OFFSETS, body, 0)
    part = resp["topics"][0]["partitions"][0]
    if part["error_code"] != 0:
        raise ScenarioError(f"ListOffsets read_committed: {error_name(Errors(part['error_code']))}")
    return int(part["offset"])
