"""The broker side of ``replication.truncation.mode`` (docs/truncation-modes.md): the initial fetch offset
handed to the fetcher, the truncation to the high watermark on becoming a follower (and so after a restart),
the leader's OFFSET_FOR_LEADER_EPOCH answer and when a new leader caches its epoch; and the config key."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from protocol.errors import Errors
from protocol.replication import TruncationMode
from server.config import ConfigError

from .broker_support import LOCAL, TP, Broker, batch
from .test_replica_manager import fetch

FOLLOWER = 1
DEFAULT = TruncationMode.LEADER_EPOCH
PRE_279 = TruncationMode.LEADER_EPOCH_PRE_KIP_279
HW = TruncationMode.HIGH_WATERMARK


def lead_with_hw_behind(broker: Broker) -> None:
    """Leader in epoch 1 of 5 records; the follower fetched 3 of them, so the HW is 3 and the LEO 5."""
    broker.leader_and_isr(LOCAL, 1, [0, 1], [0, 1])
    broker.rm.append_records(30_000, 1, {TP: batch(3)}, lambda _: None)
    broker.rm.append_records(30_000, 1, {TP: batch(2)}, lambda _: None)
    assert fetch(broker, FOLLOWER, 3).error == Errors.NONE
    partition = broker.rm.partitions[TP]
    assert (partition.log_end_offset, partition.high_watermark) == (5, 3)


@pytest.mark.parametrize(("mode", "init_offset"), [(DEFAULT, 5), (PRE_279, 3), (HW, 3)])
def test_becoming_a_follower_hands_the_fetcher_the_modes_initial_offset(
    tmp_path: Path, mode: TruncationMode, init_offset: int
) -> None:
    broker = Broker(tmp_path, truncation_mode=mode)
    lead_with_hw_behind(broker)
    broker.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    assert broker.fetchers.added[TP].init_offset == init_offset
    truncations = broker.journal_events("truncated")
    if mode is HW:
        # Kafka 0.10's makeFollowers: the log is cut to the replica's own HW before any fetch.
        [event] = truncations
        assert event["reason"] == "high_watermark"
        assert (event["truncate_to"], event["log_end_offset_before"], event["log_end_offset"]) == (3, 5, 3)
        assert broker.rm.partitions[TP].log_end_offset == 3
    else:
        # The leader-epoch modes leave the log whole for the fetcher's OFFSET_FOR_LEADER_EPOCH round.
        assert truncations == []
        assert broker.rm.partitions[TP].log_end_offset == 5


@pytest.mark.parametrize("mode", [DEFAULT, HW])
def test_restart_as_a_follower_truncates_to_the_checkpointed_hw_only_in_high_watermark_mode(
    tmp_path: Path, mode: TruncationMode
) -> None:
    broker = Broker(tmp_path, truncation_mode=mode)
    lead_with_hw_behind(broker)
    broker.rm.shutdown()  # writes the HW checkpoint (3)
    restarted = Broker(tmp_path, truncation_mode=mode)
    restarted.leader_and_isr(FOLLOWER, 2, [1, 0], [0, 1])
    partition = restarted.rm.partitions[TP]
    if mode is HW:
        assert partition.log_end_offset == 3
        assert [e["reason"] for e in restarted.journal_events("truncated")] == ["high_watermark"]
    else:
        assert partition.log_end_offset == 5
        assert restarted.journal_events("truncated") == []


def test_pre_kip_279_leader_answers_an_offset_with_no_epoch(tmp_path: Path) -> None:
    broker = Broker(tmp_path, truncation_mode=PRE_279)
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    broker.rm.append_records(30_000, 1, {TP: batch(3)}, lambda _: None)  # epoch 1: 0..2
    broker.leader_and_isr(LOCAL, 3, [0], [0, 1])
    broker.rm.append_records(30_000, 1, {TP: batch(2)}, lambda _: None)  # epoch 3: 3..4
    rm = broker.rm
    assert rm.last_offset_for_leader_epoch(TP, -1, 3) == (Errors.NONE, -1, 5)  # the latest: the LEO
    assert rm.last_offset_for_leader_epoch(TP, -1, 1) == (Errors.NONE, -1, 3)
    # An epoch the leader never had: the start of its next epoch, with no epoch (today: (1, 3)).
    assert rm.last_offset_for_leader_epoch(TP, -1, 2) == (Errors.NONE, -1, 3)
    assert rm.last_offset_for_leader_epoch(TP, -1, 0) == (Errors.NONE, -1, -1)  # below the first
    assert rm.last_offset_for_leader_epoch(TP, -1, 4) == (Errors.NONE, -1, -1)  # above the latest


@pytest.mark.parametrize(("mode", "cached"), [(DEFAULT, True), (PRE_279, False), (HW, False)])
def test_a_new_leader_caches_its_epoch_at_once_only_in_the_default_mode(
    tmp_path: Path, mode: TruncationMode, cached: bool
) -> None:
    broker = Broker(tmp_path, truncation_mode=mode)
    broker.leader_and_isr(LOCAL, 1, [0], [0, 1])
    broker.rm.append_records(30_000, 1, {TP: batch(3)}, lambda _: None)
    broker.leader_and_isr(LOCAL, 2, [0], [0, 1])
    cache = broker.rm.partitions[TP].log.leader_epoch_cache
    assert cache.latest_epoch() == (2 if cached else 1)
    # The first append in the epoch caches it in every mode (Kafka's Log.append).
    broker.rm.append_records(30_000, 1, {TP: batch(1)}, lambda _: None)
    assert cache.latest_epoch() == 2 and cache.epoch_for_offset(3) == 2


def test_config_key_default_and_validation() -> None:
    assert BrokerConfig.from_dict({"broker.id": 1}).truncation_mode is DEFAULT
    config = BrokerConfig.from_dict({"broker.id": 1, "replication.truncation.mode": "high-watermark"})
    assert config.truncation_mode is HW
    with pytest.raises(ConfigError) as bad:
        BrokerConfig.from_dict({"broker.id": 1, "replication.truncation.mode": "kip-101"})
    message = str(bad.value)
    assert "replication.truncation.mode" in message and "'kip-101'" in message
    assert "leader-epoch, leader-epoch-pre-kip-279, high-watermark" in message
