"""Producer id blocks: the controller's allocation (Kafka's ProducerIdControlManagerTest cases), its
persistence in the controller's state, the broker's ProducerIdManager (RPCProducerIdManagerTest-like:
prefetch at 90 %, COORDINATOR_LOAD_IN_PROGRESS while waiting, monotonic blocks), the unmanaged broker's
file, and INIT_PRODUCER_ID."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import trio
import trio.testing

from broker.producer_id_manager import (
    LOCAL_BLOCK_FILE,
    UNMANAGED_RANGE_SIZE,
    ProducerIdManager,
    local_block_source,
)
from controller.state import ClusterState, load_state, save_state
from protocol import producer_id_messages as pim
from protocol.api_keys import ApiKeys
from protocol.errors import Errors, KafkaError
from server.producer_ids import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdsBlock,
    ProducerIdsRecord,
    generate_next_block,
)
from tests.unit.controller.support import live_core, register
from tests.unit.waiting import wait_for

from .broker_support import Broker, make_request, response

# ---------------------------------------------------------------------- controller


def test_blocks_are_consecutive_and_of_kafkas_size() -> None:
    record = ProducerIdsRecord()
    first, record = generate_next_block(record, 1, 10)
    second, record = generate_next_block(record, 2, 20)
    assert first == ProducerIdsBlock(1, 0, 1000) and PRODUCER_ID_BLOCK_SIZE == 1000
    assert second == ProducerIdsBlock(2, 1000, 1000)
    assert (first.last_producer_id, second.next_block_first_id) == (999, 2000)
    assert record == ProducerIdsRecord(2000, 2, 20)


def test_exhausted_ids_are_an_error() -> None:
    with pytest.raises(KafkaError) as e:
        generate_next_block(ProducerIdsRecord(2**63 - 1000), 1, 1)
    assert e.value.error is Errors.UNKNOWN_SERVER_ERROR


def test_core_allocates_to_registered_brokers_and_saves_first() -> None:
    core = live_core([1, 2])
    epoch = core.state.brokers[1].epoch
    resp = core.allocate_producer_ids(pim.AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch))
    assert (resp.error_code, resp.producer_id_start, resp.producer_id_len) == (0, 0, 1000)
    assert core.drain().dirty  # persisted before the answer goes out
    again = core.allocate_producer_ids(
        pim.AllocateProducerIdsRequest(broker_id=2, broker_epoch=core.state.brokers[2].epoch)
    )
    assert again.producer_id_start == 1000
    stale = core.allocate_producer_ids(pim.AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch + 99))
    assert stale.error_code == Errors.STALE_BROKER_EPOCH
    unknown = core.allocate_producer_ids(pim.AllocateProducerIdsRequest(broker_id=7, broker_epoch=1))
    assert unknown.error_code == Errors.BROKER_ID_NOT_REGISTERED
    assert core.state.producer_ids == ProducerIdsRecord(2000, 2, core.state.brokers[2].epoch)


def test_allocation_survives_a_controller_restart(tmp_path: Path) -> None:
    core = live_core([1])
    epoch = core.state.brokers[1].epoch
    core.allocate_producer_ids(pim.AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch))
    save_state(tmp_path, core.state)
    loaded = load_state(tmp_path, core.state.cluster_id)
    assert loaded.producer_ids == ProducerIdsRecord(1000, 1, epoch)
    restarted = live_core([1], state=loaded)
    register(restarted, 1)
    epoch = restarted.state.brokers[1].epoch
    resp = restarted.allocate_producer_ids(pim.AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch))
    assert resp.producer_id_start == 1000


def test_a_state_file_from_before_producer_ids_loads(tmp_path: Path) -> None:
    save_state(tmp_path, ClusterState(cluster_id="c"))
    path = tmp_path / "cluster-metadata.json"
    data = json.loads(path.read_text())
    del data["producer_ids"]
    path.write_text(json.dumps(data))
    assert load_state(tmp_path, "c").producer_ids == ProducerIdsRecord()


# ---------------------------------------------------------------------- broker


class FakeController:
    def __init__(self, size: int = 10) -> None:
        self.size = size
        self.next = 0
        self.calls = 0
        self.fail = 0
        self.override: ProducerIdsBlock | None = None

    async def __call__(self) -> ProducerIdsBlock | None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            return None
        if self.override is not None:
            block, self.override = self.override, None
            return block
        block = ProducerIdsBlock(1, self.next, self.size)
        self.next += self.size
        return block


async def wait_for_block(manager: ProducerIdManager) -> None:
    await wait_for(lambda: manager.has_valid_block, "a block of producer ids")


async def test_ids_come_from_the_block_and_the_next_is_prefetched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = FakeController(size=10)
    manager = ProducerIdManager(1, source)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await wait_for_block(manager)
        assert source.calls == 1  # the first block is fetched at start
        ids = [manager.generate_producer_id() for _ in range(9)]
        await trio.sleep(0.1)
        assert source.calls == 1
        ids.append(manager.generate_producer_id())  # id 9 = first + 90 % of the block: prefetch
        await trio.sleep(0.1)
        assert source.calls == 2
        ids += [manager.generate_producer_id() for _ in range(10)]
        assert ids == list(range(20))
        nursery.cancel_scope.cancel()


async def test_no_block_yet_is_coordinator_load_in_progress(autojump_clock: trio.testing.MockClock) -> None:
    source = FakeController(size=2)
    source.fail = 3
    manager = ProducerIdManager(1, source)
    with pytest.raises(KafkaError) as e:
        manager.generate_producer_id()
    assert e.value.error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await wait_for_block(manager)
        assert source.calls == 4  # retried after each failure
        assert manager.generate_producer_id() == 0
        nursery.cancel_scope.cancel()


async def test_a_block_that_goes_backwards_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    source = FakeController(size=2)
    manager = ProducerIdManager(1, source)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await wait_for_block(manager)
        assert [manager.generate_producer_id() for _ in range(2)] == [0, 1]
        source.override = ProducerIdsBlock(1, 0, 2)  # overlaps the current one
        await trio.sleep(1)
        assert manager.generate_producer_id() == 2
        nursery.cancel_scope.cancel()


async def test_unmanaged_broker_persists_its_blocks(tmp_path: Path) -> None:
    source = local_block_source(3, tmp_path)
    first = await source()
    second = await source()
    base = 3 * UNMANAGED_RANGE_SIZE
    assert first == ProducerIdsBlock(3, base, 1000) and second == ProducerIdsBlock(3, base + 1000, 1000)
    # A restart reads the file: never the same ids again.
    assert await local_block_source(3, tmp_path)() == ProducerIdsBlock(3, base + 2000, 1000)
    (tmp_path / LOCAL_BLOCK_FILE).write_text("not json")
    assert await local_block_source(3, tmp_path)() is None


async def test_unmanaged_brokers_never_hand_out_the_same_ids(tmp_path: Path) -> None:
    """Unmanaged brokers share no allocator: each has its own range, so a producer id from one broker is
    never also given by another (a replica would take the second producer's batches for the first's
    retries and answer them with the first producer's offsets)."""
    blocks = {}
    for broker_id in (0, 1, 2, 3):
        source = local_block_source(broker_id, tmp_path / str(broker_id))
        (tmp_path / str(broker_id)).mkdir()
        blocks[broker_id] = [await source() for _ in range(3)]
    ranges = sorted(
        (b.first_producer_id, b.last_producer_id) for bs in blocks.values() for b in bs if b is not None
    )
    assert len(ranges) == 12
    assert all(prev[1] < nxt[0] for prev, nxt in itertools.pairwise(ranges))
    # A file written before ranges existed (next id 0) is moved up into the broker's range.
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / LOCAL_BLOCK_FILE).write_text(
        '{"next_producer_id": 5000, "broker_id": 2, "broker_epoch": -1}'
    )
    block = await local_block_source(2, tmp_path / "old")()
    assert block == ProducerIdsBlock(2, 2 * UNMANAGED_RANGE_SIZE, 1000)
    # The largest broker id's range still fits in an int64.
    top = await local_block_source(2**31 - 1, tmp_path)()
    assert top is not None and top.first_producer_id == (2**31 - 1) * UNMANAGED_RANGE_SIZE < 2**63 - 1000


# ---------------------------------------------------------------------- INIT_PRODUCER_ID


async def init_producer_id(b: Broker, **fields: object) -> pim.InitProducerIdResponse:
    request = make_request(ApiKeys.INIT_PRODUCER_ID, pim.InitProducerIdRequest(**fields))  # type: ignore[arg-type]
    await b.apis.handle(request)
    return response(request, pim.InitProducerIdResponse)


async def test_init_producer_id(tmp_path: Path) -> None:
    b = Broker(tmp_path)
    unavailable = await init_producer_id(b)
    assert unavailable.error_code == Errors.COORDINATOR_NOT_AVAILABLE
    manager = ProducerIdManager(b.apis.broker_id, FakeController(size=1000))
    b.apis.producer_id_manager = manager
    assert (await init_producer_id(b)).error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        await wait_for_block(manager)
        first = await init_producer_id(b)
        assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 0, 0)
        # With an id and epoch (version 3+) and no transactional id: a new id, epoch 0, as Kafka.
        second = await init_producer_id(b, producer_id=0, producer_epoch=5)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (0, 1, 0)
        half = await init_producer_id(b, producer_id=0)
        assert half.error_code == Errors.INVALID_REQUEST
        # A transactional id is the transaction coordinator's, not enabled on this bare broker.
        transactional = await init_producer_id(b, transactional_id="tx")
        assert transactional.error_code == Errors.COORDINATOR_NOT_AVAILABLE
        nursery.cancel_scope.cancel()
