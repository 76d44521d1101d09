"""The `warmup` section: the supervised flow-matching warm-up that makes the FlowGRPO base
(`flow_models.warmup.warm_up`). Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from run_lifecycle.fields import help_field


@dataclass(frozen=True)
class FlowWarmupConfig:
    """Its fields, with the model's, are the key of the cached base (`flow_models.base_cache`)."""

    steps: int = help_field("flow-matching optimiser steps of the base (0: the random model)", 600)
    batch_size: int = help_field("images per warm-up step", 128)
    lr: float = help_field("AdamW learning rate of the warm-up", 1e-3)
    label_noise: float = help_field(
        "fraction of warm-up labels replaced by random classes: the base follows its class loosely, leaving RL room",
        0.4,
    )
    seed: int = help_field("seed of the base's initialisation and warm-up batches", 0)

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or not self.lr > 0 or not 0 <= self.label_noise <= 1:
            raise ValueError(
                f"warmup: expected steps >= 0, batch_size >= 1, lr > 0, 0 <= label_noise <= 1, got {asdict(self)}"
            )
