"""The `train` section: how one update walks its batch (epochs, mini-batches, micro-batches), router replay and
the mismatch sample. Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass

from run_lifecycle.fields import help_field


@dataclass
class TrainLoopConfig:
    """One update (`trainers.step`) runs `ppo_epochs` passes over the batch; each pass splits it into
    `mini_batches_per_step` mini-batches (in samples: the batch is padded with inert samples to a multiple) and
    takes one optimiser step per mini-batch. A mini-batch runs in micro-batches of at most `micro_batch_tokens`
    padded tokens (rows x width); loss denominators are the mini-batch's, so the gradient does not depend on the
    micro-batch split (nor on the number of data-parallel ranks)."""

    ppo_epochs: int = help_field("passes over each batch", 1)
    mini_batches_per_step: int = help_field("optimiser steps per pass; the batch is padded to a multiple of it", 1)
    micro_batch_tokens: int = help_field(
        "tokens per trainer forward: padded ones (rows x width), or where the backend shares prompts the ones it "
        "computes (a group's prompt once)",
        4096,
    )
    router_replay: bool = help_field("replay the engine's routed experts in every trainer forward (R3)", True)
    mismatch_sample_seqs: int = help_field("sequences per step also scored WITHOUT replay (mismatch metric)", 32)

    def __post_init__(self) -> None:
        for name in ("ppo_epochs", "mini_batches_per_step", "micro_batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"train.{name}: expected an int >= 1, got {value!r}")
        if self.mismatch_sample_seqs < 0:
            raise ValueError(f"train.mismatch_sample_seqs: expected >= 0, got {self.mismatch_sample_seqs}")
