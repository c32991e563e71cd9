#!/usr/bin/env python3
"""kafka-python's integration tests (test/integration of its PyPI sdist) against a running isrsim cluster.

    kafka_python_suite.py --bootstrap 127.0.0.1:9092 [--allowlist FILE | --all] [--card FILE]

The sdist of the kafka-python installed here (same version) is fetched once with pip into a cache directory
outside the clone (ISRSIM_SUITES_CACHE, default ~/.cache/isrsim) and reused. The suite runs against an
external broker when KAFKA_URI names one; it also needs KAFKA_VERSION (isrsim serves Kafka 4's APIs),
KAFKA_ROOT (an existing directory; nothing is run from it) and shim files the sdist lacks: test/__init__.py
(the tests import `test.testutil`), test/service.py (the fixtures' ExternalService: a broker already running;
SpawnedService, which starts Kafka, is refused) and a conftest.py at the root (pytest's rootdir).
The report card (test,
PASS/FAIL/SKIP, seconds) comes from pytest's JUnit XML; the exit status is 1 if an allowlisted test did not
pass. The allowlist holds one pytest node id a line (test/integration/...::name); '#' starts a comment.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

KAFKA_VERSION = "4.0.0"
SERVICE_SHIM = '''"""The fixtures' services: the broker is external (KAFKA_URI), so nothing is spawned."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def stop(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, args=None, env=None):
        raise RuntimeError("this run uses an external broker (KAFKA_URI); it starts no Kafka")
'''


def cached_suite() -> Path:
    ver = version("kafka-python")
    cache = Path(os.environ.get("ISRSIM_SUITES_CACHE", Path.home() / ".cache" / "isrsim"))
    root = cache / f"kafka-python-{ver}"
    if (root / ".ready").is_file():
        return root
    dl = cache / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    sdist = dl / f"kafka_python-{ver}.tar.gz"
    if not sdist.is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(dl),
                f"kafka-python=={ver}",
            ],
            check=True,
        )
    root.mkdir(parents=True, exist_ok=True)
    # Only the tests: the kafka package under test is the one installed, not the sdist's copy.
    subprocess.run(
        ["tar", "xzf", str(sdist), "-C", str(root), "--strip-components=1", f"kafka_python-{ver}/test"],
        check=True,
    )
    (root / "test" / "__init__.py").write_text("")
    (root / "test" / "service.py").write_text(SERVICE_SHIM)
    (root / "conftest.py").write_text("# rootdir marker: the suite's own fixtures are in test/integration\n")
    (root / "kafka-root").mkdir(exist_ok=True)
    (root / ".ready").write_text(ver + "\n")
    return root


def read_list(path: Path) -> list[str]:
    return [
        ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines() if ln.split("#", 1)[0].strip()
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--allowlist", type=Path)
    ap.add_argument("--all", action="store_true", help="every integration test (SASL and SSL ones skip)")
    ap.add_argument("--card", type=Path)
    ap.add_argument("--timeout", type=int, default=120, help="seconds one test may take")
    args = ap.parse_args()
    root = cached_suite()
    allow = read_list(args.allowlist) if args.allowlist else []
    targets = ["test/integration"] if args.all or not allow else allow
    xml = Path(tempfile.mkdtemp(prefix="isrsim-kafka-python-")) / "junit.xml"  # one per run
    env = dict(
        os.environ,
        KAFKA_VERSION=KAFKA_VERSION,
        KAFKA_URI=f"PLAINTEXT://{args.bootstrap}",
        KAFKA_ROOT=str(root / "kafka-root"),
    )
    start = time.monotonic()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-o",
        "python_files=test_*.py",
        f"--junitxml={xml}",
        "--rootdir",
        str(root),
        *targets,
    ]
    if importlib.util.find_spec("pytest_timeout") is not None:
        cmd.insert(3, f"--timeout={args.timeout}")
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if not xml.is_file():
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        return 2
    rows = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        node = case.get("classname", "").replace(".", "/")
        module, _, cls = node.partition("/Test")
        name = (
            f"{module}.py::{case.get('name')}" if not cls else f"{module}.py::Test{cls}::{case.get('name')}"
        )
        if case.find("failure") is not None or case.find("error") is not None:
            el = case.find("failure") if case.find("failure") is not None else case.find("error")
            result, why = "FAIL", (el.get("message") or "").splitlines()[0][:140] if el is not None else ""
        elif case.find("skipped") is not None:
            result, why = "SKIP", (case.find("skipped").get("message") or "")[:100]  # type: ignore[union-attr]
        else:
            result, why = "PASS", ""
        rows.append((name, result, float(case.get("time", "0")), why))
    counts = {r: sum(1 for row in rows if row[1] == r) for r in ("PASS", "FAIL", "SKIP")}
    bad = [a for a in allow if not any(n == a and r == "PASS" for n, r, _, _ in rows)]
    lines = [f"kafka-python {version('kafka-python')} integration tests, {len(rows)} in {elapsed:.0f} s"]
    lines += [f"| {n} | {r} | {t:.1f}s | {why}" for n, r, t, why in rows]
    lines.append(f"kafka-python: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    if allow:
        lines.append(
            f"allowlist: {len(allow) - len(bad)} of {len(allow)} pass"
            + (f"; not passing: {' '.join(bad)}" if bad else "")
        )
    card = "\n".join(lines)
    print(card)
    if args.card:
        args.card.parent.mkdir(parents=True, exist_ok=True)
        args.card.write_text(card + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
