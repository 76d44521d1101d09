"""PolicyGradient: what PPO, GSPO and decoupled PPO share: the advantage estimator, the KL-to-reference term (in
the loss or as a reward penalty) and the rollout correction (the config's own `correction` section)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from trainers.aggregation import AggMode
from trainers.algorithm.config import PolicyGradientConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.batch import TrainBatch
from trainers.estimators import Advantages, outcome_token_rewards, token_advantages
from trainers.kl import kl_loss, kl_penalty_rewards


def split_metrics(loss: torch.Tensor, metrics: dict[str, torch.Tensor]) -> LossOutputs:
    """Sorts a loss function's metrics by name: `*_loss` are sums (global denominators), `*_max` maxima, the
    rest token means."""
    out = LossOutputs(loss)
    for key, value in metrics.items():
        target = out.sums if key.endswith("_loss") else out.maxima if key.endswith("_max") else out.means
        target[key] = value
    return out


class PolicyGradient(ABC):
    """Subclasses set `name` and `recompute_old_log_probs` and implement `policy_loss`."""

    name = ""
    recompute_old_log_probs = False
    uses_teacher = False

    def __init__(self, cfg: PolicyGradientConfig, *, max_new_tokens: int) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"{type(self).__name__}: expected max_new_tokens >= 1, got {max_new_tokens}")
        self.cfg = cfg
        self.agg_mode = AggMode(cfg.agg_mode)
        self.loss_scale_factor = cfg.loss_scale_factor or float(max_new_tokens)
        self.needs_reference = cfg.kl.coef > 0
        self.correction = cfg.correction if cfg.correction.enabled else None

    def advantages(
        self, batch: TrainBatch, old_log_probs: torch.Tensor | None, ref_log_probs: torch.Tensor | None
    ) -> Advantages:
        """Advantages of the CPU batch; a KL reward penalty compares the old policy (the rollout's in bypass mode)
        with the reference."""
        kl, cfg = self.cfg.kl, self.cfg
        if not (self.needs_reference and kl.mode == "reward"):
            return token_advantages(cfg.advantage, batch, gamma=cfg.gamma, lam=cfg.lam)
        if ref_log_probs is None:
            raise ValueError(f"{self.name}: a KL reward penalty needs ref_log_probs, got None")
        policy = batch.rollout_log_probs if old_log_probs is None else old_log_probs.cpu()
        outcome = outcome_token_rewards(batch.rewards, batch.response_mask)
        rewards, metrics = kl_penalty_rewards(
            outcome, policy, ref_log_probs.cpu(), batch.response_mask, kl.estimator, kl.coef
        )
        adv = token_advantages(cfg.advantage, batch, token_rewards=rewards, gamma=cfg.gamma, lam=cfg.lam)
        return Advantages(adv.tokens, adv.per_sample, metrics)

    @abstractmethod
    def policy_loss(self, inputs: LossInputs) -> LossOutputs:
        """The policy-gradient loss of one micro-batch (the KL term is added by `loss`)."""

    def loss(self, inputs: LossInputs) -> LossOutputs:
        out = self.policy_loss(inputs)
        kl = self.cfg.kl
        if not (self.needs_reference and kl.mode == "loss"):
            return out
        if inputs.ref_log_probs is None:
            raise ValueError(f"{self.name}: a KL loss term needs ref_log_probs, got None")
        term, metrics = kl_loss(
            inputs.log_probs,
            inputs.ref_log_probs,
            inputs.mask,
            kind=kl.estimator,
            agg_mode=self.agg_mode,
            num_tokens=inputs.num_tokens,
            num_seqs=inputs.num_seqs,
            loss_scale_factor=self.loss_scale_factor,
        )
        return out.merged(split_metrics(kl.coef * term, metrics))
