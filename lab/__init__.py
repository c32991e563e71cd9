"""The lab: what is run against a cluster to learn something about it. ``bench`` (throughput, latency,
failover, catch-up), ``chaos`` (a seeded nemesis under a workload), ``scenarios`` (KIP-101, KIP-279 and
other stories replayed), ``demo`` (the main job end to end). Each builds on the local-cluster kit (``kit``);
the command line (``cli``) gives each its options."""
