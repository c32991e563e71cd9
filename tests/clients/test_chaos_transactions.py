"""`isrsim chaos --workload transactions` (`make clients`): a short seeded run of every fault kind with an
exactly-once workload through Kafka's own C client (a transactional source and a consume-transform-produce
processor committing its offsets with TxnOffsetCommit), judged by the report: every transaction atomic,
read_committed reads isolated, no transaction left hanging, nothing acknowledged lost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.chaos.schedule import make_schedule
from tests.integration.cluster_support import Cluster, cluster_up
from tests.integration.test_chaos import ALL, CHAOS_SETTINGS, run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.clients]

DURATION, INTERVAL = 30.0, 2.5
SETTINGS = (
    *CHAOS_SETTINGS,
    "transaction.state.log.num.partitions=4",
    "offsets.topic.num.partitions=4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=2000",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from cluster_up(tmp_path / "root", settings=SETTINGS)


@pytest.mark.timeout(1500)
def test_chaos_with_transactions_is_judged_by_the_transaction_checks(cluster: Cluster) -> None:
    seed = next(
        s
        for s in range(1000)
        if all(make_schedule(s, DURATION, INTERVAL, ALL, 1, [1, 2, 3]).counts().values())
    )
    out, run = run_chaos(
        cluster,
        "--workload", "transactions", "--seed", str(seed), "--duration", str(DURATION),
        "--interval", str(INTERVAL), "--rate", "200", "--partitions", "3",
        timeout=1200,  # a loaded 2-core machine: the workload and the report take their time
    )  # fmt: skip
    print(f"{out[-3000:]}\nchaos-run.json: {run}")
    assert "workload (transactions):" in out and "isrsim report: VALID" in out
    assert run["report_exit_code"] == 0 and run["not_converged"] == []
    assert run["records_acked"] > 0, run
    report = json.loads((cluster.root / "report" / "report.json").read_text())
    checks = {c["name"]: c for c in report["checks"]}
    for name in ("transactions_atomic", "read_committed_isolated", "no_hanging_transactions"):
        assert checks[name]["verdict"] == "valid" and checks[name]["checked"], checks[name]
    # The processor committed its input offsets inside its transactions (TxnOffsetCommit on the group).
    assert "processed exactly once" in out
