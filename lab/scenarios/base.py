"""A scenario: a story told by a script over the CLI's own client library, and what each truncation mode
is expected to show at its end."""

from __future__ import annotations

from dataclasses import dataclass

from lab.scenarios.run import ScenarioRun

MODES = ("leader-epoch", "leader-epoch-pre-kip-279", "high-watermark")
DEFAULT_MODE = MODES[0]


OUTCOMES = {
    "consistent": "every replica holds the same log and every acknowledged batch",
    "acked-lost": "an acknowledged (acks=all) batch is missing from the replicas",
    "diverged": "two replicas hold different batches at the same offset below the high watermark",
}


@dataclass(frozen=True)
class Expectation:
    """``outcome``: what the segment files show (``consistent``, ``acked-lost``, ``diverged``);
    ``failing_checks``: empty when the report passes, else the checks of which at least one fails."""

    outcome: str
    failing_checks: tuple[str, ...] = ()
    why: str = ""

    @property
    def report_passes(self) -> bool:
        return not self.failing_checks

    def describe(self) -> str:
        files = OUTCOMES[self.outcome]
        report = (
            "the report is valid"
            if self.report_passes
            else f"the report is INVALID ({' or '.join(self.failing_checks)})"
        )
        return f"{files}; {report}"


PASS = Expectation("consistent")


class Scenario:
    name: str = ""
    title: str = ""
    story: str = ""  # one paragraph: the KIP's (or Kafka's) story
    needs_net: bool = False
    brokers: int = 3
    settings: tuple[str, ...] = ()
    # Whether the story changes with transaction.partition.verification.enable (KIP-890).
    about_verification: bool = False

    def expected(self, mode: str) -> Expectation:
        return PASS

    def expected_under(self, mode: str, verification: bool) -> Expectation:
        """What the scenario shows under truncation ``mode`` and ``transaction.partition.verification.enable``
        = ``verification`` (only the transaction scenarios look at the latter)."""
        return self.expected(mode)

    def play(self, run: ScenarioRun) -> None:
        raise NotImplementedError
