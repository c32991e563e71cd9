"""`isrsim chaos --client librdkafka` (`make clients`): a short seeded run of every fault kind with Kafka's
own C client as the workload, judged by the report from what the leaders acknowledged to it (their
acked.jsonl): nothing acknowledged lost, no divergence, the replicas converged."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.chaos.schedule import make_schedule
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.test_chaos import ALL, CHAOS_SETTINGS, assert_every_action_recorded, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.clients]

DURATION, INTERVAL = 30.0, 2.5  # every fault kind fits (a covering seed); short, for make clients's budget


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", settings=CHAOS_SETTINGS)


@pytest.mark.timeout(900)
def test_chaos_driven_by_librdkafka_is_judged_by_the_report(cluster: Cluster) -> None:
    seed = next(
        s
        for s in range(1000)
        if all(make_schedule(s, DURATION, INTERVAL, ALL, 1, [1, 2, 3]).counts().values())
    )
    schedule = make_schedule(seed, DURATION, INTERVAL, ALL, 1, [1, 2, 3])
    out, run = run_chaos(
        cluster,
        "--client", "librdkafka", "--seed", str(seed), "--duration", str(DURATION),
        "--interval", str(INTERVAL), "--rate", "1000", "--partitions", "3",
        timeout=720,
    )  # fmt: skip
    print(f"{out[-3000:]}\nchaos-run.json: {run}")
    assert "workload (librdkafka):" in out and "isrsim report: VALID" in out
    assert run["client"] == "librdkafka" and run["report_exit_code"] == 0 and run["not_converged"] == []
    assert run["records_acked"] > DURATION * 1000 / 3, run  # it wrote through most of the faults
    assert run["injected"] == schedule.counts()
    assert_every_action_recorded(cluster.root, schedule)

    report = json.loads((cluster.root / "report" / "report.json").read_text())
    assert report["verdict"] == "valid"
    # No isrsim producer ran: every acknowledgement judged is a leader's, to librdkafka's client id.
    assert not list((cluster.root / "workload").glob("acked-*.jsonl"))
    clients = set()
    for b in cluster.info.brokers:
        path = Path(b.journal).parent / "acked.jsonl"
        clients |= {json.loads(x)["client_id"] for x in path.read_text().splitlines() if x.strip()}
    assert clients and all(c.startswith("chaos-librdkafka-") for c in clients), clients
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["acked_not_lost"]["verdict"] == "valid", checks["acked_not_lost"]
    assert checks["acked_not_lost"]["checked"] > 0
    availability = report["availability"]
    assert availability["acknowledged"] == run["records_acked"]
    assert availability["intended"] >= run["records_sent"]
