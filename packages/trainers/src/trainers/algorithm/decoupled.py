"""Decoupled PPO (AReaL): trust region at the recomputed proximal policy, tokens weighted by pi_prox / mu."""

from __future__ import annotations

from trainers.algorithm.config import DecoupledConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.algorithm.policy_gradient import PolicyGradient, split_metrics
from trainers.policy_loss import decoupled_ppo_loss


class Decoupled(PolicyGradient):
    name = "decoupled"
    recompute_old_log_probs = True  # the proximal policy is always the trainer's weights before the update

    def __init__(self, cfg: DecoupledConfig, *, max_new_tokens: int) -> None:
        super().__init__(cfg, max_new_tokens=max_new_tokens)
        self.decoupled = cfg

    def policy_loss(self, x: LossInputs) -> LossOutputs:
        c = self.decoupled
        loss, metrics = decoupled_ppo_loss(
            x.log_probs,
            x.old_log_probs,
            x.rollout_log_probs,
            x.advantages,
            x.mask,
            is_cap=c.is_cap or None,
            clip_low=c.clip_low,
            clip_high=c.clip_high,
            dual_clip_c=c.dual_clip_c if c.dual_clip_c > 1 else None,
            agg_mode=self.agg_mode,
            is_weights=x.is_weights,
            num_tokens=x.num_tokens,
            num_seqs=x.num_seqs,
            loss_scale_factor=self.loss_scale_factor,
        )
        return split_metrics(loss, metrics)
