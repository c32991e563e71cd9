"""The node shells take work off the loop only through ``protocol.environment.run_sync``: a direct
``trio.to_thread`` call would run on a real thread in a simulated run too, and one seed would no longer be
one history (SPEC §15)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_PACKAGES = ("protocol", "server", "storage", "raft", "controller", "coordinator", "broker", "fetcher")


def test_node_packages_reach_threads_only_through_the_environment() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for package in NODE_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "environment.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "to_thread." in line and not line.lstrip().startswith("#")
    ]
    assert offenders == [], "use protocol.environment.run_sync: " + ", ".join(offenders)
