"""``python -m cli.bench`` runs ``isrsim bench``."""

from cli.bench.command import bench

bench()
