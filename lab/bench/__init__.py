"""``isrsim bench``: the benchmark suite.

One module per scenario group (``ceiling``, ``throughput`` (2, 3), ``failover`` (4), ``catchup`` (5),
``fetch_sessions`` (6), ``report_job`` (7)), the broker processes they start (``cluster``), the runner, the
results (rich table and ``results.json``) and the click command (``cli.bench_cmd.bench``).
"""
