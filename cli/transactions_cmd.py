"""``isrsim transactions list | describe ID | describe-producers`` (kafka-transactions.sh --list / describe /
describe-producers): the transactional ids the brokers coordinate; for one its state by Kafka's name,
producer id and epoch, timeout, start time, the partitions of its open transaction and its coordinator; a
partition's active producers, from its leader (docs/transactions.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import trio

from cli.group_cmd import BOOTSTRAP_OPTION, DATA_DIR_OPTION, RETRY_ERRORS, _run, _table
from cli.main import setup_logging
from cli.output import OUTPUT_OPTION, echo_json
from kit.cluster_client import ClientError, ClusterClient
from protocol import ApiKeys, ConnectionClosed, Errors, error_name

FIND_COORDINATOR_VERSION = 1  # the first with key_type
COORDINATOR_TYPE_TRANSACTION = 1
LIST_TRANSACTIONS_VERSION = 1


async def _ask(
    client: ClusterClient, broker_id: int, api: ApiKeys, body: dict[str, Any], version: int
) -> Any:
    conn = await client.broker_connection(broker_id)
    return await conn.request(api, body, api_version=version, timeout=10)


async def _coordinator(client: ClusterClient, transactional_id: str, wait_s: float = 15.0) -> int:
    """The broker id of the transactional id's coordinator, waiting while __transaction_state is created
    or its partition loads."""
    last = Errors.NONE
    body = {"key": transactional_id, "key_type": COORDINATOR_TYPE_TRANSACTION}
    with trio.move_on_after(wait_s):
        while True:
            for broker_id in sorted(client.brokers):
                try:
                    resp = await _ask(
                        client, broker_id, ApiKeys.FIND_COORDINATOR, body, FIND_COORDINATOR_VERSION
                    )
                except (OSError, trio.TooSlowError, ConnectionClosed):
                    continue
                last = Errors(resp["error_code"])
                if last == Errors.NONE:
                    return int(resp["node_id"])
                break
            if last not in RETRY_ERRORS:
                break
            await trio.sleep(0.2)
            await client.refresh_metadata()
    raise ClientError(f"no coordinator for transactional id {transactional_id!r}: {last.name}")


async def describe_transaction(client: ClusterClient, transactional_id: str) -> dict[str, Any]:
    """Everything ``transactions describe`` shows, as one document (its ``-o json``)."""
    await client.refresh_metadata()
    state: dict[str, Any] = {}
    coordinator = -1
    with trio.fail_after(20):
        while True:
            coordinator = await _coordinator(client, transactional_id)
            resp = await _ask(
                client,
                coordinator,
                ApiKeys.DESCRIBE_TRANSACTIONS,
                {"transactional_ids": [transactional_id]},
                0,
            )
            state = resp["transaction_states"][0]
            error = Errors(state["error_code"])
            if error == Errors.NONE:
                break
            if error not in RETRY_ERRORS:
                raise ClientError(f"transactional id {transactional_id!r}: {error_name(error)}")
            await trio.sleep(0.2)
    start = int(state["transaction_start_time_ms"])
    return {
        "transactional_id": transactional_id,
        "coordinator": coordinator,
        "state": state["transaction_state"],
        "producer_id": state["producer_id"],
        "producer_epoch": state["producer_epoch"],
        "transaction_timeout_ms": state["transaction_timeout_ms"],
        "transaction_start_time_ms": start if start >= 0 else None,
        "partitions": [
            {"topic": topic, "partition": p}
            for topic, p in sorted((t["topic"], p) for t in state["topics"] for p in t["partitions"])
        ],
    }


async def list_transactions(client: ClusterClient) -> list[dict[str, Any]]:
    """Every transactional id of every live broker (each lists those it coordinates)."""
    await client.refresh_metadata()
    out: list[dict[str, Any]] = []
    for broker_id in sorted(client.brokers):
        try:
            resp = await _ask(client, broker_id, ApiKeys.LIST_TRANSACTIONS, {}, LIST_TRANSACTIONS_VERSION)
        except (OSError, trio.TooSlowError, ConnectionClosed):
            continue
        for t in resp["transaction_states"]:
            out.append(
                {
                    "transactional_id": t["transactional_id"],
                    "producer_id": t["producer_id"],
                    "state": t["transaction_state"],
                    "coordinator": broker_id,
                }
            )
    return sorted(out, key=lambda t: str(t["transactional_id"]))


async def describe_producers(client: ClusterClient, topic: str, partition: int) -> dict[str, Any]:
    """A partition's active producers (DescribeProducers at its leader), retried while leadership moves."""
    partitions = await client.topic_partitions(topic, wait_s=2.0)
    if partition not in partitions:
        raise ClientError(f"partition {partition} does not exist in {topic} ({len(partitions)} partitions)")
    last = Errors.NONE
    with trio.move_on_after(15):
        while True:
            await client.refresh_metadata([topic])
            leader = client.leader_for((topic, partition))
            if leader >= 0:
                body = {"topics": [{"name": topic, "partition_indexes": [partition]}]}
                try:
                    resp = await _ask(client, leader, ApiKeys.DESCRIBE_PRODUCERS, body, 0)
                except (OSError, trio.TooSlowError, ConnectionClosed):
                    resp = None
                if resp is not None:
                    p = resp["topics"][0]["partitions"][0]
                    last = Errors(p["error_code"])
                    if last == Errors.NONE:
                        return {
                            "topic": topic,
                            "partition": partition,
                            "leader": leader,
                            "producers": p["active_producers"],
                        }
                    if last not in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION):
                        break
            await trio.sleep(0.2)
    raise ClientError(f"no producers of {topic}-{partition}: {error_name(last) if last else 'no leader'}")


@click.group()
def transactions() -> None:
    """List and describe transactions (kafka-transactions)."""


@transactions.command("list")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
@OUTPUT_OPTION
def list_cmd(data_dir: Path | None, bootstrap_server: str | None, output: str) -> None:
    """Every transactional id, its producer id, state and coordinator."""
    setup_logging("WARNING", "transactions")
    found = _run(list_transactions, data_dir, bootstrap_server)
    if output == "json":
        echo_json(found)
        return
    rows = [[t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]] for t in found]
    for line in _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows):
        click.echo(line)


@transactions.command("describe")
@click.argument("transactional_id", metavar="ID")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
@OUTPUT_OPTION
def describe_cmd(
    transactional_id: str, data_dir: Path | None, bootstrap_server: str | None, output: str
) -> None:
    """ID's coordinator, state, producer id and epoch, timeout, start time and open partitions."""
    setup_logging("WARNING", "transactions")
    doc = _run(lambda client: describe_transaction(client, transactional_id), data_dir, bootstrap_server)
    if output == "json":
        echo_json(doc)
        return
    headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TopicPartitions",
    ]
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in doc["partitions"]) or "-"
    row = [
        doc["coordinator"],
        doc["transactional_id"],
        doc["producer_id"],
        doc["producer_epoch"],
        doc["state"],
        doc["transaction_timeout_ms"],
        doc["transaction_start_time_ms"],
        partitions,
    ]
    for line in _table(headers, [row]):
        click.echo(line)


@transactions.command("describe-producers")
@click.option("--topic", required=True, help="The topic.")
@click.option("--partition", type=click.IntRange(0), required=True, help="The partition.")
@DATA_DIR_OPTION
@BOOTSTRAP_OPTION
@OUTPUT_OPTION
def describe_producers_cmd(
    topic: str, partition: int, data_dir: Path | None, bootstrap_server: str | None, output: str
) -> None:
    """The partition's active producers at its leader: id, epoch, last coordinator epoch, last sequence and
    timestamp, the first offset of the open transaction (-1: none)."""
    setup_logging("WARNING", "transactions")
    doc = _run(lambda client: describe_producers(client, topic, partition), data_dir, bootstrap_server)
    if output == "json":
        echo_json(doc)
        return
    headers = [
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    ]
    rows = [
        [
            p["producer_id"],
            p["producer_epoch"],
            p["coordinator_epoch"],
            p["last_sequence"],
            p["last_timestamp"],
            p["current_txn_start_offset"],
        ]
        for p in doc["producers"]
    ]
    for line in _table(headers, rows):
        click.echo(line)
