"""The controller's metrics: elections counted from its journal events, gauges read from its state."""

from __future__ import annotations

from controller.controller import CONTROLLER_APIS
from controller.controller_metrics import ControllerMetrics
from controller.core import ControllerCore
from controller.state import PartitionState
from tests.unit.controller.support import SESSION_MS, create_topic, heartbeat, live_core, set_partition

KC = "kafka_controller_kafkacontroller_"
STATS = "kafka_controller_controllerstats_"


def metrics_of(core: ControllerCore | None) -> ControllerMetrics:
    return ControllerMetrics(CONTROLLER_APIS, lambda: None if core is None else core.state, process=False)


def value(metrics: ControllerMetrics, name: str) -> float:
    v = metrics.registry.get_sample_value(name)
    assert v is not None, f"no sample {name}"
    return v


def test_a_controller_not_yet_running_is_not_active() -> None:
    metrics = metrics_of(None)
    assert value(metrics, KC + "activecontrollercount") == 0
    assert value(metrics, KC + "offlinepartitionscount") == 0


def test_cluster_gauges_follow_the_state() -> None:
    core = live_core([1, 2, 3])
    metrics = metrics_of(core)
    create_topic(core, "t", 3, 2)
    metrics.on_events(core.drain().events)
    assert value(metrics, KC + "activecontrollercount") == 1
    assert value(metrics, KC + "globaltopiccount") == 1
    assert value(metrics, KC + "globalpartitioncount") == 3
    assert value(metrics, KC + "activebrokercount") == 3
    assert value(metrics, KC + "fencedbrokercount") == 0
    assert value(metrics, KC + "preferredreplicaimbalancecount") == 0
    # A new partition's first leader is no election.
    assert value(metrics, STATS + "leaderelectionrateandtimems_total") == 0


def test_an_unclean_election_and_an_offline_partition_are_counted() -> None:
    core = live_core([1, 2], unclean=True)
    metrics = metrics_of(core)
    set_partition(core, "t", 0, PartitionState([1, 2], 1, 0, [1]))  # broker 2 is out of the ISR
    set_partition(core, "u", 0, PartitionState([1], 1, 0, [1]))  # broker 1 is its only replica
    heartbeat(core, 2, now_ms=SESSION_MS)
    assert core.tick(SESSION_MS + 1) == [1]
    metrics.on_events(core.drain().events)
    assert core.state.topics["t"].partitions[0].leader == 2
    assert value(metrics, STATS + "leaderelectionrateandtimems_total") == 1  # u's leaderless is none
    assert value(metrics, STATS + "uncleanleaderelectionspersec_total") == 1
    assert value(metrics, KC + "offlinepartitionscount") == 1
    assert value(metrics, KC + "fencedbrokercount") == 1
    assert value(metrics, KC + "preferredreplicaimbalancecount") == 1
