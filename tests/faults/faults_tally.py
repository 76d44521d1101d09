"""FaultTally: what the fault suite injected and checked, summed over its tests for the one summary line.

Every invariant goes through `check`, which counts it and, when it does not hold, counts a violation and raises
AssertionError with the schedule's description, so a violation fails its test and shows in the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FaultTally:
    schedules: int = 0
    faults: int = 0
    checks: int = 0
    violations: int = 0
    tests: list[str] = field(default_factory=list)  # one report line per finished test
    notes: list[str] = field(default_factory=list)  # what the running test injected and checked

    def note(self, text: str) -> None:
        """What the running test injected and what it checked (printed with its report line)."""
        print(text)
        self.notes.append(text)

    def schedule(self, faults: int = 0) -> None:
        """One schedule run (an interleaving of faults with generation or training) with `faults` injected."""
        self.schedules += 1
        self.faults += faults

    def injected(self, n: int = 1) -> None:
        self.faults += n

    def check(self, holds: bool, what: str) -> None:
        """One invariant: counted; a violation is counted and raised."""
        self.checks += 1
        if not holds:
            self.violations += 1
            raise AssertionError(f"invariant violated: {what}")

    def line(self) -> str:
        return (
            f"fault suite: {self.schedules} schedules, {self.faults} faults injected, {self.checks} invariant checks, "
            f"{self.violations} violations ({len(self.tests)} tests reported)"
        )


TALLY = FaultTally()  # one per pytest process: conftest prints it at the end of the session
