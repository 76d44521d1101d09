"""The shape of one routing row: which model it describes."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

MAX_EXPERTS = 1 << 16  # ids are stored as uint16 at most


@dataclass(frozen=True)
class RoutingSpec:
    """Shape of a routing row: `[num_layers, top_k]` expert ids, each in `[0, num_experts)`.

    `num_layers` counts the MoE layers that route (a dense layer has no row entry). `layers`: the decoder layer of
    each column, ascending (e.g. `(1, 2, 3)` for a model whose layer 0 is dense); None when whoever made the spec
    does not know the model's layers (the columns are then only MoE ordinals).
    """

    num_layers: int
    top_k: int
    num_experts: int
    layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name in ("num_layers", "top_k", "num_experts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"RoutingSpec.{name}: expected a positive int, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"RoutingSpec.top_k: expected <= num_experts ({self.num_experts}), got {self.top_k}")
        if self.num_experts > MAX_EXPERTS:
            raise ValueError(f"RoutingSpec.num_experts: expected <= {MAX_EXPERTS}, got {self.num_experts}")
        if self.layers is not None:
            layers = tuple(int(i) for i in self.layers)
            ascending = all(b > a for a, b in itertools.pairwise(layers))
            if len(layers) != self.num_layers or not ascending or min(layers) < 0:
                raise ValueError(
                    f"RoutingSpec.layers: expected {self.num_layers} ascending decoder-layer indices >= 0, got {layers}"
                )
            object.__setattr__(self, "layers", layers)

    @property
    def dtype(self) -> np.dtype:
        """Storage dtype: `uint8` when ids fit in a byte (<= 256 experts), else `uint16`."""
        return np.dtype(np.uint8) if self.num_experts <= 256 else np.dtype(np.uint16)

    @property
    def row_shape(self) -> tuple[int, int]:
        return (self.num_layers, self.top_k)
