"""The header under the verdict never claims what a check did not examine (SPEC §13)."""

from __future__ import annotations

from spark_jobs.render import verdict_words


def test_a_valid_run_names_the_checks_that_had_nothing_of_their_kind() -> None:
    checks = [
        {"name": "acked_not_lost", "verdict": "valid", "checked": 120},
        {"name": "transactions_atomic", "verdict": "valid", "checked": None},
        {"name": "consumer_no_skip", "verdict": "valid", "checked": 0},
    ]
    words = verdict_words("valid", checks)
    assert "every check examined" not in words
    assert "2 of 3" in words and "transactions_atomic" in words and "consumer_no_skip" in words


def test_a_valid_run_where_every_check_examined_something_says_so() -> None:
    checks = [{"name": "acked_not_lost", "verdict": "valid", "checked": 3}]
    assert verdict_words("valid", checks) == "no check found a violation, and every check examined something"
    assert verdict_words("invalid", checks) == "a check found a violation"
