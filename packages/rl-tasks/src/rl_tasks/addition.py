"""Multi-digit addition: `"12+345="` -> `"357"`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ADDITION_SOURCE = "addition"


@dataclass(frozen=True)
class AdditionSource:
    """Both operands have a digit count drawn uniformly from `[min_digits, max_digits]`, then a value
    uniformly among numbers with exactly that many digits (`0..9` counts as one digit), so short operands are
    not swamped by long ones. Answers are 1 to `max_digits + 1` characters long."""

    min_digits: int = field(default=1, metadata={"help": "fewest digits of an addend"})
    max_digits: int = field(default=3, metadata={"help": "most digits of an addend"})
    name: str = field(default=ADDITION_SOURCE, metadata={"help": "data source name (metrics and dumps)"})

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits <= 18:
            raise ValueError(
                f"AdditionSource: expected 1 <= min_digits <= max_digits <= 18, "
                f"got min_digits={self.min_digits}, max_digits={self.max_digits}"
            )

    @property
    def alphabet(self) -> str:
        return "0123456789+="

    def _operand(self, rng: np.random.Generator) -> int:
        digits = int(rng.integers(self.min_digits, self.max_digits + 1))
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return int(rng.integers(low, 10**digits))

    def sample(self, rng: np.random.Generator) -> tuple[str, str]:
        """One `(prompt, answer)` pair."""
        a, b = self._operand(rng), self._operand(rng)
        return f"{a}+{b}=", str(a + b)
