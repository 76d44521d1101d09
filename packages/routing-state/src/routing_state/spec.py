"""The shape of one routing row: which model it describes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_EXPERTS = 1 << 16  # ids are stored as uint16 at most


@dataclass(frozen=True)
class RoutingSpec:
    """Shape of a routing row: `[num_layers, top_k]` expert ids, each in `[0, num_experts)`.

    `num_layers` counts the MoE layers that route (a dense layer has no row entry).
    """

    num_layers: int
    top_k: int
    num_experts: int

    def __post_init__(self) -> None:
        for name in ("num_layers", "top_k", "num_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"RoutingSpec.{name}: expected a positive int, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"RoutingSpec.top_k: expected <= num_experts ({self.num_experts}), got {self.top_k}")
        if self.num_experts > MAX_EXPERTS:
            raise ValueError(f"RoutingSpec.num_experts: expected <= {MAX_EXPERTS}, got {self.num_experts}")

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype: `uint8` when ids fit in a byte (<= 256 experts), else `uint16`."""
        return np.dtype(np.uint8) if self.num_experts <= 256 else np.dtype(np.uint16)

    @property
    def row_shape(self) -> tuple[int, int]:
        return (self.num_layers, self.top_k)
