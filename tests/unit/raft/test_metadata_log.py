"""``MetadataLog``: the Raft core over the project's own ``Log`` on disk, restarted from its files."""

from __future__ import annotations

import random
from pathlib import Path

from protocol.records import iter_batches
from raft import messages as rm
from raft.election_state import FileQuorumStateStore
from raft.metadata_log import MetadataLog
from raft.raft_client import KafkaRaftClient
from raft.raft_log import MemoryRaftLog, OffsetAndEpoch, truncate_to_end_offset, validate_offset_and_epoch


def test_same_answers_as_the_memory_log(tmp_path: Path) -> None:
    disk = MetadataLog.open(tmp_path)
    memory = MemoryRaftLog()
    for epoch in (1, 1, 3, 3, 4):
        disk.append_as_leader([b"x", b"y"], epoch)
        memory.append_as_leader([b"x", b"y"], epoch)
    disk.flush()
    assert disk.end_offset == memory.end_offset == 10
    assert disk.last_fetched_epoch() == memory.last_fetched_epoch() == 4
    for epoch in range(7):
        assert disk.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch)
        for offset in range(12):
            assert validate_offset_and_epoch(disk, offset, epoch) == validate_offset_and_epoch(
                memory, offset, epoch
            )
    assert (
        truncate_to_end_offset(disk, OffsetAndEpoch(3, 6))
        == truncate_to_end_offset(memory, OffsetAndEpoch(3, 6))
        == 6
    )
    assert disk.last_fetched_epoch() == 3


def test_a_voter_restarts_from_its_log_and_quorum_state_on_disk(tmp_path: Path) -> None:
    log = MetadataLog.open(tmp_path)
    client = KafkaRaftClient(
        1000, [1000], log, FileQuorumStateStore(tmp_path), now_ms=0, rng=random.Random(1)
    )
    assert client.is_leader()
    client.append([b"a", b"b"], 1)
    log.close()
    segment_dir = tmp_path / "__cluster_metadata-0"
    assert (segment_dir / "leader-epoch-checkpoint").exists() and (tmp_path / "quorum-state").exists()
    data = (segment_dir / "00000000000000000000.log").read_bytes()
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 1]

    log = MetadataLog.open(tmp_path)
    again = KafkaRaftClient(1000, [1000], log, FileQuorumStateStore(tmp_path), now_ms=0, rng=random.Random(1))
    # It led epoch 1: it restarts resigned, stands again (the only voter) and leads epoch 2.
    assert again.is_leader() and again.epoch == 2
    assert log.end_offset == 4 and again.high_watermark == 4
    follower_log = MemoryRaftLog()
    response = again.handle_request(1000, rm.FetchRequest(1, 1000, 2, 0, 0), 5)
    assert isinstance(response, rm.FetchResponse)
    follower_log.append_as_follower(response.records)
    assert [v for _, _, v in follower_log.entries()][1:3] == [b"a", b"b"]
