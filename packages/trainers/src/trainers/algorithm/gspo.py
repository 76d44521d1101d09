"""GSPO: PPO's clip on the sequence-level (geometric-mean) ratio, aggregated per sequence."""

from __future__ import annotations

from trainers.algorithm.config import GSPOConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.algorithm.policy_gradient import PolicyGradient, split_metrics
from trainers.policy_loss import gspo_loss


class GSPO(PolicyGradient):
    name = "gspo"

    def __init__(self, cfg: GSPOConfig, *, max_new_tokens: int) -> None:
        super().__init__(cfg, max_new_tokens=max_new_tokens)
        self.gspo = cfg
        self.recompute_old_log_probs = cfg.old_log_probs == "recompute"

    def policy_loss(self, x: LossInputs) -> LossOutputs:
        c = self.gspo
        loss, metrics = gspo_loss(
            x.log_probs,
            x.old_log_probs,
            x.advantages,
            x.mask,
            clip_low=c.clip_low,
            clip_high=c.clip_high,
            is_weights=x.is_weights,
            num_seqs=x.num_seqs,
        )
        return split_metrics(loss, metrics)
