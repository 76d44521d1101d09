"""OPD: on-policy distillation. The student sampled the batch; a teacher scored every sampled token at rollout time
(`TrainBatch.teacher_log_probs`, passed to the loss as `ref_log_probs`). With `d = log pi_T - log pi_S` on the
sampled token (pi_S: the old policy, i.e. the rollout's log-probs in bypass mode):

- `pg`: advantage `clamp(d, +-c)` per token (+ `reward_coef` x the task reward's advantage), through PPO's clipped
  surrogate: the policy gradient of the negative reverse KL, `-KL(pi_S || pi_T)`, with the teacher as a dense
  per-token reward (no discount: each token is credited with its own log-ratio);
- `k2` / `k3`: `distill_coef` x the supervised estimator of `KL(pi_S || pi_T)` on the sampled token (`trainers.kl`:
  `k2 = 0.5 (log pi_S - log pi_T)^2`, `k3 = exp(-r) + r - 1` with `r = log pi_S - log pi_T`), gradient through
  log pi_S, beside PPO on the task reward's advantage when `reward_coef` > 0;
- `topk_fkl`: `distill_coef` x GKD's forward KL over the teacher's top-k at every position the student visited
  (the teacher's renormalised top-k distribution as the target, the student's log-probs of those ids from the same
  forward): it pushes up the tokens the teacher prefers, not only down the sampled ones it dislikes.

Metrics (token means over the loss mask): `opd/reverse_kl` (k1 estimate of KL(pi_S || pi_T) under the old policy),
`opd/teacher_log_prob`, `opd/student_log_prob`, `opd/clamped_frac` (pg advantages hit by the clamp).
"""

from __future__ import annotations

import torch

from trainers.aggregation import aggregate, masked_mean
from trainers.algorithm.config import OPDConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.algorithm.policy_gradient import PolicyGradient, split_metrics
from trainers.algorithm.ppo import clipped_surrogate
from trainers.batch import TrainBatch
from trainers.estimators import Advantages, token_advantages
from trainers.kl import kl_loss


class OPD(PolicyGradient):
    name = "opd"
    uses_teacher = True

    def __init__(self, cfg: OPDConfig, *, max_new_tokens: int) -> None:
        super().__init__(cfg, max_new_tokens=max_new_tokens)
        self.opd = cfg
        self.recompute_old_log_probs = cfg.old_log_probs == "recompute"

    def advantages(
        self, batch: TrainBatch, old_log_probs: torch.Tensor | None, ref_log_probs: torch.Tensor | None
    ) -> Advantages:
        """`ref_log_probs` are the teacher's. pg: the clamped log-ratio (+ the reward's advantage); k2/k3: the
        reward's advantage (0 when `reward_coef` is 0: the loss is the distillation term alone)."""
        if ref_log_probs is None:
            raise ValueError("opd: expected the teacher's log-probs (ref_log_probs), got None")
        c, mask = self.opd, batch.response_mask
        student = batch.rollout_log_probs if old_log_probs is None else old_log_probs.detach().cpu()
        teacher = ref_log_probs.detach().cpu()
        log_ratio = (teacher - student) * mask
        metrics = {
            "opd/reverse_kl": masked_mean(-log_ratio, mask),
            "opd/teacher_log_prob": masked_mean(teacher, mask),
            "opd/student_log_prob": masked_mean(student, mask),
        }
        tokens = torch.zeros_like(mask)
        per_sample = torch.zeros(mask.shape[0])
        if c.reward_coef > 0:
            reward = token_advantages(c.advantage, batch, gamma=c.gamma, lam=c.lam)
            tokens, per_sample = c.reward_coef * reward.tokens, c.reward_coef * reward.per_sample
        if c.loss == "pg":
            clamped = log_ratio.clamp(-c.log_ratio_clamp, c.log_ratio_clamp)
            metrics["opd/clamped_frac"] = masked_mean((clamped != log_ratio).float(), mask)
            tokens = tokens + clamped * mask
            per_sample = (tokens * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return Advantages(tokens, per_sample, metrics)

    def policy_loss(self, x: LossInputs) -> LossOutputs:
        c = self.opd
        out: LossOutputs | None = None
        if c.loss == "pg" or c.reward_coef > 0:
            out = clipped_surrogate(c, x, self)
        if c.loss == "pg":
            assert out is not None
            return out
        if c.loss == "topk_fkl":
            term, metrics = self._top_k_forward_kl(x)
            distill = split_metrics(c.distill_coef * term, metrics)
            return distill if out is None else out.merged(distill)
        if x.ref_log_probs is None:
            raise ValueError(f"opd ({c.loss}): expected the teacher's log-probs (ref_log_probs), got None")
        term, metrics = kl_loss(
            x.log_probs,
            x.ref_log_probs,
            x.mask,
            kind=c.loss,
            agg_mode=self.agg_mode,
            num_tokens=x.num_tokens,
            num_seqs=x.num_seqs,
            loss_scale_factor=self.loss_scale_factor,
        )
        distill = split_metrics(c.distill_coef * term, {f"opd/{k.split('/')[-1]}": v for k, v in metrics.items()})
        return distill if out is None else out.merged(distill)

    def _top_k_forward_kl(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """GKD's forward KL on the teacher's top-k: per row, `sum_k q_k (log q_k - log pi_theta(k))` with `q` the
        teacher's top-k distribution renormalised over its valid entries (>= 0; 0 where the student matches
        the teacher's top-k). Aggregated like the policy loss over loss tokens."""
        if x.top_k_log_probs is None or x.teacher_top_k is None:
            raise ValueError(
                "opd (topk_fkl): expected the teacher's top-k and the student's log-probs at those ids, "
                "got none (teacher.top_k must be > 0)"
            )
        teacher, valid = x.teacher_top_k
        student = x.top_k_log_probs
        masked = teacher.masked_fill(~valid, float("-inf"))
        log_q = masked - torch.logsumexp(masked, dim=-1, keepdim=True)  # [b, t, K]; -inf where invalid
        q = log_q.exp().nan_to_num(0.0)  # rows without a valid entry: q = 0
        per_token = (q * (log_q.nan_to_num(0.0, neginf=0.0) - student)).sum(-1)  # [b, t]
        loss = aggregate(
            per_token,
            x.mask,
            self.agg_mode,
            num_tokens=x.num_tokens,
            num_seqs=x.num_seqs,
            loss_scale_factor=self.loss_scale_factor,
        )
        mass = (student.detach().exp() * valid).sum(-1)  # the student's probability on the teacher's top-k
        return loss, {"opd/fkl_loss": loss.detach(), "opd/student_top_k_mass": masked_mean(mass, x.mask)}
