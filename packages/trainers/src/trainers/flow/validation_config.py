"""The `validation` section of FlowGRPO: what `trainers.flow.validation.validate` samples and how many images the grids
show. Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass
class FlowValidationConfig:
    every_steps: int = help_field("validate every k steps (and before the first and after the last step)", 25)
    samples_per_class: int = help_field("validation images per class (fixed seeds)", 20)
    num_steps: int = help_field("denoising steps of the deterministic (ODE) validation sampler", 20)
    seed: int = help_field("seed of the validation noise (the same images every validation)", 1234)
    grid_per_class: int = help_field("images per class in plots/samples_<step>.png (the first seeds)", 8)

    def __post_init__(self) -> None:
        if self.every_steps < 1 or self.samples_per_class < 1 or self.num_steps < 1 or self.grid_per_class < 0:
            raise ValueError(
                "validation: expected every_steps, samples_per_class, num_steps >= 1 and grid_per_class "
                f">= 0; got {self.every_steps}, {self.samples_per_class}, {self.num_steps}, "
                f"{self.grid_per_class}"
            )
        if self.grid_per_class > self.samples_per_class:
            raise ValueError(
                f"validation.grid_per_class: expected <= samples_per_class {self.samples_per_class}, "
                f"got {self.grid_per_class}"
            )
