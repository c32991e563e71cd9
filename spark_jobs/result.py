"""The outcome of one check: verdict, how many rows violate it, examples of those rows, notes and extra
tables (information that is not a violation, e.g. convergence times).

Verdicts are Jepsen's: ``valid`` (the check examined something and found no violation), ``invalid`` (it
found at least one) and ``unknown`` (it examined nothing, ``checked == 0``: no evidence either way, e.g. the
workload journal is missing, so no acknowledged batch could be looked for). The report's verdict is
``invalid`` if any check is, else ``unknown`` if any check is, else ``valid`` (``overall_verdict``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_EXAMPLES = 20
# report.json's layout: 2 added verdicts valid/invalid/unknown, typed fields (lists, not prose), t0_ms,
# fault_windows, time_to_converge and fault_matrix. Readers should check it.
SCHEMA_VERSION = 2
VALID = "valid"
INVALID = "invalid"
UNKNOWN = "unknown"


def overall_verdict(verdicts: list[str]) -> str:
    """``invalid`` if any is, else ``unknown`` if any is (or there is none), else ``valid``."""
    if INVALID in verdicts:
        return INVALID
    if UNKNOWN in verdicts or not verdicts:
        return UNKNOWN
    return VALID


@dataclass
class CheckResult:
    name: str
    title: str
    description: str
    passed: bool
    violations: int
    examples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    checked: int | None = None

    @property
    def verdict(self) -> str:
        """``invalid`` with a violation; else ``unknown`` if nothing was examined; else ``valid``."""
        if not self.passed:
            return INVALID
        return UNKNOWN if self.checked == 0 else VALID

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "verdict": self.verdict,
            "passed": self.passed,
            "checked": self.checked,
            "violations": self.violations,
            "examples": self.examples,
            "notes": self.notes,
            "extra": self.extra,
        }
