"""Keeping Spark's own output out of the report's terminal output.

The JVM behind a local SparkSession is a child process that inherits this process's stderr: its start-up
lines (the JVM's module warnings, log4j's "Using Spark's default log4j profile", "Setting default log level",
the native-hadoop warning) and any later log4j line would cut into the report's progress lines. While the
session starts, file descriptor 2 points at a log file, so the JVM (and the Python workers it starts later)
write there for good; this process's own stderr is put back at once. If Spark fails to start, the tail of
that file is shown with the error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def spark_output_to(path: Path) -> Iterator[Path]:
    """Run the block (starting Spark) with fd 2 redirected into ``path``; the JVM keeps writing there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 2)
        try:
            yield path
        except BaseException as exc:
            os.dup2(saved, 2)
            tail = _tail(path)
            if tail:
                exc.add_note(f"Spark's output ({path}):\n{tail}")
            raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


__all__ = ["spark_output_to"]
