"""Several small result tables of one check in one Spark action.

The report's inputs are metadata (batch headers, journal lines), so a check's time is mostly Spark's fixed
cost per action (planning, scheduling, a Python round trip), not data. A check therefore names every table
it needs (its violating rows, their count, its extra tables) and :func:`collect_tables` fetches them all
with one ``collect()``: the tables become branches of one union, each branch's rows wrapped in a struct
column of its own, so every table keeps its own columns and types.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from spark_jobs.result import CheckResult


def plain(value: Any) -> Any:
    """A collected value as JSON-ready Python: rows and structs as dicts, dates as ISO text."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, list | tuple) and not isinstance(value, Row):
        return [plain(v) for v in value]
    if hasattr(value, "asDict"):
        return {k: plain(v) for k, v in value.asDict(recursive=True).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def top(df: DataFrame, order: Sequence[str | Column], limit: int) -> DataFrame:
    """The first ``limit`` rows of ``df`` in ``order`` (a table for :func:`collect_tables`)."""
    return df.orderBy(*order).limit(limit)


def count_of(df: DataFrame, *distinct: str) -> DataFrame:
    """One row, ``n``: the rows of ``df`` (or its distinct values of ``distinct``)."""
    if distinct:
        return df.agg(F.countDistinct(*distinct).alias("n"))
    return df.agg(F.count(F.lit(1)).alias("n"))


def collect_tables(tables: dict[str, DataFrame]) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows (as plain dicts, in the table's own order) from one Spark action."""
    if not tables:
        return {}
    names = list(tables)
    branches = []
    for i, name in enumerate(names):
        df = tables[name]
        cols = [df[c] for c in df.columns]
        branches.append(df.select(F.lit(i).alias("_table"), F.struct(*cols).alias(f"_t{i}")))
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), branches)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for row in union.collect():
        i = row["_table"]
        out[names[i]].append({k: plain(v) for k, v in row[f"_t{i}"].asDict(recursive=True).items()})
    return out


def single(rows: list[dict[str, Any]], key: str = "n") -> Any:
    """The value of a one-row table (``count_of``), None for no row."""
    return rows[0][key] if rows else None


def violation_tables(
    violations: DataFrame, order: Sequence[str], max_examples: int, prefix: str = ""
) -> dict[str, DataFrame]:
    """The tables ``finished`` needs: the first ``max_examples`` violating rows and their count."""
    return {
        f"{prefix}examples": top(violations, order, max_examples),
        f"{prefix}violations": count_of(violations),
    }


def finished(
    name: str,
    title: str,
    description: str,
    got: dict[str, list[dict[str, Any]]],
    *,
    checked: int | None,
    notes: list[str] | None = None,
    extra: dict[str, list[dict[str, Any]]] | None = None,
    prefix: str = "",
) -> CheckResult:
    """The check's result from its collected ``violation_tables`` (no action of its own)."""
    count = int(single(got[f"{prefix}violations"]) or 0)
    return CheckResult(
        name,
        title,
        description,
        passed=count == 0,
        violations=count,
        examples=got[f"{prefix}examples"],
        notes=list(notes or []),
        extra=dict(extra or {}),
        checked=checked,
    )
