"""A decision whose metadata record the log refuses (docs/controller.md, "Bounds of one operation"): the
active controller does not keep a state the log does not have. It goes back to its last committed state,
keeps its leadership and epoch, answers the request UNKNOWN_SERVER_ERROR, and goes on deciding.

Two real voters in-process on loopback (``tests/unit/controller/test_commit_wait.py``). The log's
batch limit is made small on the leader so that an ordinary topic passes it; the bound that normally
refuses such a creation first (``ControllerCore.state_record_bytes``) is lifted to reach the fallback."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from protocol.api_keys import ApiKeys
from protocol.errors import Errors
from tests.unit.controller.test_commit_wait import active, quorum, register
from tests.unit.controller.test_shell import call, fake_broker, journal
from tests.unit.waiting import wait_for


def create(name: str, partitions: int) -> dict[str, object]:
    return {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
        "timeout_ms": 5000,
    }


async def test_a_record_the_log_refuses_sends_the_controller_back_to_its_committed_state(
    tmp_path: Path,
) -> None:
    async with fake_broker(1) as broker, quorum(tmp_path, fetch_timeout_ms=4000) as controllers:
        leader = await active(controllers)
        assert leader.bound_port is not None and leader.raft is not None and leader.core is not None
        port, epoch = leader.bound_port, leader.active_epoch
        await register(port, broker)
        log = leader.raft.log.log
        normal = log.config
        log.config = dataclasses.replace(normal, max_message_bytes=4096)
        leader.core.state_record_bytes = None
        refused_core = leader.core

        answer = await call(port, ApiKeys.CREATE_TOPICS, create("big", 200))
        assert answer["error_code"] == Errors.UNKNOWN_SERVER_ERROR, answer
        assert "4096" in answer["error_message"]
        # Back to the committed state, still the active controller of the same epoch.
        await wait_for(lambda: leader.core is not None and leader.core is not refused_core, "a fresh core")
        assert leader.active_epoch == epoch and leader.raft.leads(epoch)
        assert leader.core is not None and "big" not in leader.core.state.topics
        assert not journal(leader.directory, "topic_created")

        log.config = normal
        answer = await call(port, ApiKeys.CREATE_TOPICS, create("small", 2))
        assert [t["error_code"] for t in answer["topics"]] == [0], answer
        assert leader.active_epoch == epoch
        assert [e["topic"] for e in journal(leader.directory, "topic_created")] == ["small"]
