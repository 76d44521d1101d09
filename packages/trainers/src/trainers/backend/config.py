"""TorchBackendConfig: optimiser, loss and batching knobs of the plain-torch training backend."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainers.aggregation import AggMode


@dataclass
class TorchBackendConfig:
    """Knobs of `TorchBackend.train_step`.

    One `train_step` runs `ppo_epochs` passes over the batch; each pass splits it into `mini_batches_per_step`
    mini-batches (in samples, so the batch size must be a multiple of it) and takes one AdamW step per
    mini-batch. A mini-batch is processed in micro-batches of at most `micro_batch_tokens` padded tokens
    (`rows x width`); the loss denominators are those of the whole mini-batch, so the gradient does not depend on
    the micro-batch split.
    """

    lr: float = field(default=1e-4, metadata={"help": "AdamW learning rate"})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW decoupled weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "max global grad norm (L2) per optimiser step"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each batch"})
    mini_batches_per_step: int = field(default=1, metadata={"help": "optimiser steps per pass (samples split evenly)"})
    micro_batch_tokens: int = field(default=4096, metadata={"help": "padded tokens (rows x width) per forward"})
    clip_low: float = field(default=0.2, metadata={"help": "PPO ratio clip below 1"})
    clip_high: float = field(default=0.2, metadata={"help": "PPO ratio clip above 1 (DAPO clip-higher if larger)"})
    dual_clip_c: float = field(default=3.0, metadata={"help": "dual-clip cap for negative advantages (<= 1: off)"})
    agg_mode: str = field(
        default="token-mean", metadata={"help": "loss aggregation: token-mean, seq-mean-token-mean, ..."}
    )
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature the log-probs are taken under"})
    policy_loss: str = field(
        default="ppo_clip",
        metadata={
            "help": "ppo_clip: PPO against old_log_probs (the rollout's unless recomputed); decoupled: AReaL's "
            "decoupled PPO, proximal = the recomputed old_log_probs, behaviour = the rollout's (needs recompute)"
        },
    )
    is_cap: float = field(
        default=0.0, metadata={"help": "decoupled: truncate the behaviour IS weight pi_prox/mu at this cap (0: none)"}
    )
    mismatch_sample_seqs: int = field(
        default=32, metadata={"help": "sequences per step whose log-probs are also computed WITHOUT router replay"}
    )
    seed: int = field(default=0, metadata={"help": "seeds the choice of the no-replay mismatch sample"})

    def __post_init__(self) -> None:
        if not self.lr > 0 or not self.grad_clip > 0 or not self.temperature > 0:
            raise ValueError(
                f"TorchBackendConfig: expected lr, grad_clip, temperature > 0, got {self.lr}, {self.grad_clip}, "
                f"{self.temperature}"
            )
        for name in ("ppo_epochs", "mini_batches_per_step", "micro_batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TorchBackendConfig.{name}: expected an int >= 1, got {value!r}")
        if self.mismatch_sample_seqs < 0:
            raise ValueError(f"TorchBackendConfig.mismatch_sample_seqs: expected >= 0, got {self.mismatch_sample_seqs}")
        AggMode(self.agg_mode)  # raises ValueError naming the bad mode
        if self.policy_loss not in ("ppo_clip", "decoupled"):
            raise ValueError(
                f"TorchBackendConfig.policy_loss: expected 'ppo_clip' or 'decoupled', got {self.policy_loss!r}"
            )
        if self.is_cap < 0 or (0 < self.is_cap < 1):
            raise ValueError(f"TorchBackendConfig.is_cap: expected 0 (off) or >= 1, got {self.is_cap}")

    @property
    def dual_clip(self) -> float | None:
        return self.dual_clip_c if self.dual_clip_c > 1 else None
