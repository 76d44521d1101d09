"""Sorting a digit string: `"sort:31415="` -> `"11345"`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SORT_SOURCE = "sort"
SORT_PREFIX = "sort:"


@dataclass(frozen=True)
class SortSource:
    """The string length is uniform in `[min_len, max_len]`, each digit uniform in 0-9. The answer has the
    same length as the input, so this source gives the long tail of response lengths."""

    min_len: int = field(default=2, metadata={"help": "fewest digits to sort"})
    max_len: int = field(default=12, metadata={"help": "most digits to sort"})
    name: str = field(default=SORT_SOURCE, metadata={"help": "data source name (metrics and dumps)"})

    def __post_init__(self) -> None:
        if not 1 <= self.min_len <= self.max_len:
            raise ValueError(
                f"SortSource: expected 1 <= min_len <= max_len, got min_len={self.min_len}, max_len={self.max_len}"
            )

    @property
    def alphabet(self) -> str:
        return "0123456789=" + SORT_PREFIX

    def sample(self, rng: np.random.Generator) -> tuple[str, str]:
        """One `(prompt, answer)` pair."""
        n = int(rng.integers(self.min_len, self.max_len + 1))
        digits = "".join(str(int(d)) for d in rng.integers(0, 10, size=n))
        return f"{SORT_PREFIX}{digits}=", "".join(sorted(digits))
