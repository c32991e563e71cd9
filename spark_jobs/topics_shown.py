"""Which partitions the report's plots, lag panels and fault x partition matrix show (SPEC §13): the user's
topics; the internal ones (``__consumer_offsets``, ``__transaction_state``) only with ``--include-internal``.
A matrix wider than ``MAX_MATRIX_COLUMNS`` partitions folds them per topic (one column per topic, its
partitions' changes summed), so that it fits the page."""

from __future__ import annotations

from typing import Any

from spark_jobs.clients import INTERNAL_TOPICS

MAX_MATRIX_COLUMNS = 12
COUNTS = ("leader_changes", "isr_shrinks", "isr_expands")


def shown_partitions(tps: list[tuple[str, int]], include_internal: bool) -> list[tuple[str, int]]:
    """``tps`` without the internal topics' partitions, unless ``include_internal``."""
    if include_internal:
        return list(tps)
    return [tp for tp in tps if tp[0] not in INTERNAL_TOPICS]


def fold_matrix(
    matrix: dict[str, Any], partitions: list[tuple[str, int]], max_columns: int = MAX_MATRIX_COLUMNS
) -> dict[str, Any]:
    """``matrix`` (``figures.fault_matrix``'s, its columns ``partitions``) as is when it has at most
    ``max_columns`` columns; else one column per topic ("topic (N partitions)"), each cell the sum of the
    topic's partitions' cells, and ``folded`` True."""
    if len(partitions) <= max_columns:
        return matrix
    topics: list[str] = []
    for topic, _ in partitions:
        if topic not in topics:
            topics.append(topic)
    sizes = {t: sum(1 for tp in partitions if tp[0] == t) for t in topics}
    cells = []
    for row in matrix["cells"]:
        folded = {t: dict.fromkeys(COUNTS, 0) for t in topics}
        for (topic, _), cell in zip(partitions, row, strict=True):
            for k in COUNTS:
                folded[topic][k] += int(cell.get(k, 0))
        cells.append([folded[t] for t in topics])
    return {
        **matrix,
        "partitions": [f"{t} ({sizes[t]} partition{'s' if sizes[t] != 1 else ''})" for t in topics],
        "cells": cells,
        "folded": True,
    }


__all__ = ["MAX_MATRIX_COLUMNS", "fold_matrix", "shown_partitions"]
