#!/usr/bin/env python3
"""librdkafka's own test suite (tests/test-runner) against a running isrsim cluster, one test per process.

    librdkafka_suite.py --bootstrap 127.0.0.1:9092 [--allowlist FILE | --tests 0001,0002 | --all]
                        [--quick] [--idempotent] [--timeout 300] [--card FILE]

The test-runner is built once by librdkafka_build.sh into a cache directory outside the clone. Each test runs
as `test-runner -E -p1 [-Q] [-P] -L` with TESTS=<name> and a test.conf naming the cluster; its own verdict
line (PASSED, FAILED, SKIPPED) is the result, a test that outlives --timeout is a FAIL (killed), and a test
that never announces a verdict under -L is a local test (no broker) and is left off the card.
The report card (test, result, seconds) is printed and saved; the exit status is 1 if a test on the
allowlist did not pass, else 0. The allowlist file holds one test name a line; '#' starts a comment.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERDICT = re.compile(r"=+ Test (\S+) (PASSED|FAILED|SKIPPED) =+")


def read_list(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def all_tests(tests_dir: Path) -> list[str]:
    text = (tests_dir / "test.c").read_text()
    return sorted(set(re.findall(r"_TEST_DECL\((\d{4}_\w+)\)", text)))


def run_one(runner: Path, work: Path, name: str, flags: list[str], timeout: float) -> tuple[str, float, str]:
    start = time.monotonic()
    lib = runner.parent.parent
    env = dict(
        os.environ,
        TESTS=name,
        RDKAFKA_TEST_CONF=str(work / "test.conf"),
        LD_LIBRARY_PATH=f"{lib / 'src'}:{lib / 'src-cpp'}",
    )
    env.pop("KAFKA_PATH", None)
    proc = subprocess.Popen(
        [str(runner), "-E", "-p1", "-L", *flags],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        verdicts = {m.group(1): m.group(2) for m in VERDICT.finditer(out)}
        result = verdicts.get(name, "LOCAL")
        if result == "LOCAL" and proc.returncode != 0:
            result = "FAILED"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        result = "TIMEOUT"
    elapsed = time.monotonic() - start
    reason = ""
    if result in ("FAILED", "TIMEOUT"):
        # The failure line '### Test "<name>" failed at <file:line> ... ###', then the reason.
        lines = out.splitlines()
        at = [i for i, ln in enumerate(lines) if f'### Test "{name}" failed' in ln]
        why = lines[at[0] + 1].strip() if at and at[0] + 1 < len(lines) else (lines[-1] if lines else "")
        reason = re.sub(r"\x1b\[[0-9;]*m", "", why)[:160]
    return result, elapsed, reason


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--allowlist", type=Path)
    ap.add_argument("--tests", help="comma-separated test names (or their 4-digit numbers)")
    ap.add_argument("--all", action="store_true", help="every test of the suite")
    ap.add_argument("--quick", action="store_true", help="-Q: quick mode")
    ap.add_argument("--idempotent", action="store_true", help="-P: every producer idempotent")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one test may take")
    ap.add_argument("--card", type=Path, help="where to save the report card")
    args = ap.parse_args()

    build = subprocess.run([str(HERE / "librdkafka_build.sh")], check=True, capture_output=True, text=True)
    tests_dir = Path(build.stdout.strip().splitlines()[-1])
    sys.stderr.write(build.stderr)
    known = all_tests(tests_dir)
    allow = read_list(args.allowlist) if args.allowlist else []
    if args.tests:
        wanted = [t.strip() for t in args.tests.split(",") if t.strip()]
        names = [k for k in known if any(k == w or k.startswith(w + "_") or k[:4] == w for w in wanted)]
    elif args.all:
        names = known
    else:
        names = [k for k in known if k in allow]
    missing = [a for a in allow if a not in known]
    if missing:
        print(f"allowlist names no such test: {missing}", file=sys.stderr)
        return 2
    flags = (["-Q"] if args.quick else []) + (["-P"] if args.idempotent else [])
    mode = ("quick" if args.quick else "full") + (" -P" if args.idempotent else "")
    rows: list[tuple[str, str, float, str]] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="isrsim-librdkafka-") as tmp:
        work = Path(tmp)
        (work / "test.conf").write_text(f"bootstrap.servers={args.bootstrap}\n")
        for name in names:
            result, elapsed, reason = run_one(tests_dir / "test-runner", work, name, flags, args.timeout)
            if result == "LOCAL":
                continue
            rows.append((name, result, elapsed, reason))
            print(f"{name:45} {result:8} {elapsed:7.1f}s {reason}", flush=True)
    counts = {r: sum(1 for row in rows if row[1] == r) for r in ("PASSED", "FAILED", "TIMEOUT", "SKIPPED")}
    bad = [row[0] for row in rows if row[0] in allow and row[1] != "PASSED"]
    version = tests_dir.parent.parent.parent.parent.name
    lines = [
        f"librdkafka test suite ({mode} mode), {len(rows)} broker tests in {time.monotonic() - start:.0f} s"
    ]
    lines += [
        f"| {n} | {'PASS' if r == 'PASSED' else 'SKIP' if r == 'SKIPPED' else 'FAIL'} | {t:.1f}s | {why}"
        for n, r, t, why in rows
    ]
    lines.append(
        f"librdkafka: {counts['PASSED']} passed, {counts['FAILED'] + counts['TIMEOUT']} failed, "
        f"{counts['SKIPPED']} skipped ({version})"
    )
    if allow:
        lines.append(
            f"allowlist: {len([a for a in allow if a in names]) - len(bad)} of {len(allow)} pass"
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
