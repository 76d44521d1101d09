"""The `validation` section of the LLM apps (standard library only: `--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass
class ValidationConfig:
    every_steps: int = help_field("validate every k steps (and before the first and after the last step)", 10)
    greedy: bool = help_field("greedy decoding of every validation prompt (val-core/<source>/acc/mean@1)", True)
    samples_per_prompt: int = help_field("also sample n >= 2 responses per prompt (mean@n, pass@k, ...); 0: off", 0)
    temperature: float = help_field("temperature of the sampled validation responses", 1.0)
    max_prompts: int = help_field("validation prompts used (the first of the split); 0: all", 0)

    def __post_init__(self) -> None:
        if self.every_steps < 1 or self.max_prompts < 0 or not self.temperature > 0:
            raise ValueError(
                f"validation: expected every_steps >= 1, max_prompts >= 0, temperature > 0; got {self.every_steps}, "
                f"{self.max_prompts}, {self.temperature}"
            )
        if self.samples_per_prompt == 1 or self.samples_per_prompt < 0:
            raise ValueError(
                f"validation.samples_per_prompt: expected 0 (off) or >= 2 (n=1 is the greedy pass's name), got "
                f"{self.samples_per_prompt}"
            )
        if not self.greedy and self.samples_per_prompt == 0:
            raise ValueError("validation: expected greedy = true or samples_per_prompt >= 2, got neither")
