"""The `debug` section (one flat section, standard library only): the precision probe.

`--debug.precision_steps 1,20` compares, at those steps, the engine's and the trainer's forward on the first
`precision_samples` responses of the step, op by op and layer by layer, and writes `debug/precision/step_<s>.jsonl`
to the run directory; `uv run python -m moe_models.precision_report <run dir>` prints where they first diverge.
"""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass
class DebugConfig:
    precision_steps: tuple[int, ...] = help_field("steps at which the precision probe runs (empty: off)", ())
    precision_samples: int = help_field(
        "responses of the step the probe compares (the first ones, in request order)", 2
    )
    precision_layers: tuple[int, ...] = help_field("decoder layers the probe records (empty: every layer)", ())
    precision_tolerance: float = help_field(
        "relative difference (max |engine - trainer| / max |trainer|) above which an op counts as diverged, and any "
        "routing flip; the report's default",
        1e-2,
    )

    def __post_init__(self) -> None:
        if any(s < 1 for s in self.precision_steps):
            raise ValueError(f"debug.precision_steps: expected steps >= 1, got {list(self.precision_steps)}")
        if self.precision_samples < 1 or any(layer < 0 for layer in self.precision_layers):
            raise ValueError(
                f"debug: expected precision_samples >= 1 and layers >= 0, got {self.precision_samples}, "
                f"{list(self.precision_layers)}"
            )
        if not self.precision_tolerance > 0:
            raise ValueError(f"debug.precision_tolerance: expected > 0, got {self.precision_tolerance}")
