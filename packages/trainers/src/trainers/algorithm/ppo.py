"""PPO: the clipped surrogate with dual clip, against the rollout's log-probs (bypass) or recomputed ones."""

from __future__ import annotations

from trainers.algorithm.config import PPOConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.algorithm.policy_gradient import PolicyGradient, split_metrics
from trainers.policy_loss import ppo_clip_loss


class PPO(PolicyGradient):
    name = "ppo"

    def __init__(self, cfg: PPOConfig, *, max_new_tokens: int) -> None:
        super().__init__(cfg, max_new_tokens=max_new_tokens)
        self.ppo = cfg
        self.recompute_old_log_probs = cfg.old_log_probs == "recompute"

    def policy_loss(self, x: LossInputs) -> LossOutputs:
        return clipped_surrogate(self.ppo, x, self)


def clipped_surrogate(c: PPOConfig, x: LossInputs, pg: PolicyGradient) -> LossOutputs:
    """PPO's clipped surrogate of one micro-batch with `c`'s clip range and dual clip, aggregated as `pg` says
    (PPO's loss, and on-policy distillation's policy-gradient term)."""
    loss, metrics = ppo_clip_loss(
        x.log_probs,
        x.old_log_probs,
        x.advantages,
        x.mask,
        clip_low=c.clip_low,
        clip_high=c.clip_high,
        dual_clip_c=c.dual_clip_c if c.dual_clip_c > 1 else None,
        agg_mode=pg.agg_mode,
        is_weights=x.is_weights,
        num_tokens=x.num_tokens,
        num_seqs=x.num_seqs,
        loss_scale_factor=pg.loss_scale_factor,
    )
    return split_metrics(loss, metrics)
