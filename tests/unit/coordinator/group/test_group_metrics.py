"""The group coordinator's metrics, read from its core at scrape time."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from coordinator.group.coordinator_core import GroupConfig
from coordinator.group.group_metrics import GroupCoordinatorCollector
from tests.unit.coordinator.group.support import Harness


def scrape(h: Harness) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GroupCoordinatorCollector(h.core))
    out: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_groups_by_state_offsets_and_rebalances() -> None:
    h = Harness()
    (a, b), generation = h.stable_group("a", "b")
    h.commit({("t", 0): 1, ("t", 1): 2}, member_id=a, generation=generation)
    got = scrape(h)
    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    assert got[prefix + "numgroups"] == 1
    assert got[prefix + "numgroupsstable"] == 1
    assert got[prefix + "numgroupsempty"] == 0
    assert got[prefix + "numoffsets"] == 2
    assert got[prefix + "numpartitionsowned"] == 1
    rates = "kafka_coordinator_group_group_coordinator_metrics_"
    assert got[rates + "group_rebalance_count"] == 1
    assert got[rates + "group_completed_rebalance_count"] == 1
    assert got[rates + "offset_commit_count"] == 2
    h.leave(a, b)
    assert scrape(h)[prefix + "numgroupsempty"] == 1


def test_expired_offsets_are_counted() -> None:
    h = Harness(config=GroupConfig(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000))
    h.commit({("t", 0): 1, ("t", 1): 2})
    rates = "kafka_coordinator_group_group_coordinator_metrics_"
    assert scrape(h)[rates + "offset_expiration_count"] == 0
    h.advance(70_000)
    assert scrape(h)[rates + "offset_expiration_count"] == 2
    assert scrape(h)["kafka_coordinator_group_groupmetadatamanager_numgroups"] == 0
