"""FlowLossInputs -> LossOutputs: the FlowGRPO loss of one micro-batch at one trained denoising step.

    r   = exp(log p_theta(x_{j+1} | x_j) - log p_old)                       [b]
    pg  = max(-A r, -A clip(r, 1 - eps, 1 + eps))                           [b]
    kl  = reduce_elements((mu_theta - mu_ref)^2 / (2 std^2))                [b]   (beta > 0 only)
    loss = (sum_b pg + beta sum_b kl) / (num_samples * num_steps)

`w` is 1, or for a batch sampled by older weights than the trainer's (with `old_policy trainer`, where `p_old` is
the trainer's recompute before the update) the truncated behaviour weight `min(p_old / p_rollout, cap)`, which
corrects for sampling by the older weights as decoupled PPO does.

`num_samples` is the mini-batch's sample count and `num_steps` the trained steps per sample, so the sum of the
loss over micro-batches and steps is the mini-batch's mean over samples and steps: gradient accumulation over
micro-batches x window steps is exact. The KL is the closed-form KL between the two step Gaussians (same std)
per latent element, averaged (reduction mean) or summed (sum) like the log-prob; the Flow-GRPO reference divides
by the std *without* the sqrt(|dt|) factor, i.e. its KL is this one times |dt| (so its beta 0.04 is this beta
times |dt|).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers.algorithm.loss_io import LossOutputs


@dataclass(frozen=True)
class FlowLossInputs:
    log_probs: torch.Tensor  # [b] log p_theta of the stored step outcome (the only input with a gradient, with mean)
    old_log_probs: torch.Tensor  # [b] the behaviour policy's (the rollout's), detached
    advantages: torch.Tensor  # [b], already clamped
    mean: torch.Tensor  # [b, ...] the step Gaussian's mean under theta
    std: torch.Tensor  # 0-dim, the step Gaussian's std
    num_samples: float
    num_steps: int
    reduction: str  # mean | sum over latent elements
    ref_mean: torch.Tensor | None = None  # [b, ...] under the reference weights (beta > 0)
    behaviour_weights: torch.Tensor | None = None  # [b] detached, stale samples' truncated IS weights; None: all 1


def flow_grpo_loss(inputs: FlowLossInputs, clip_eps: float, beta: float) -> LossOutputs:
    denom = inputs.num_samples * inputs.num_steps
    delta = inputs.log_probs - inputs.old_log_probs
    ratio = torch.exp(delta)
    adv = inputs.advantages
    pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps))
    if inputs.behaviour_weights is not None:
        pg = pg * inputs.behaviour_weights
    loss = pg.sum() / denom
    clipped = (torch.abs(ratio.detach() - 1) > clip_eps).float()
    sums = {"actor/pg_loss": pg.detach().sum() / denom}
    means = {
        "actor/clip_frac": clipped.mean(),
        "actor/ratio": ratio.detach().mean(),
        "actor/approx_kl": 0.5 * (delta.detach() ** 2).mean(),  # k2 estimate of KL(old || theta) per step
    }
    if beta > 0:
        if inputs.ref_mean is None:
            raise ValueError("flow_grpo_loss: beta > 0 needs the reference policy's step means, got none")
        per_element = (inputs.mean - inputs.ref_mean) ** 2 / (2 * inputs.std**2)
        flat = per_element.flatten(1)
        kl = flat.mean(dim=1) if inputs.reduction == "mean" else flat.sum(dim=1)
        loss = loss + beta * kl.sum() / denom
        sums["actor/kl_ref"] = kl.detach().sum() / denom
    sums["actor/loss"] = loss.detach()
    return LossOutputs(loss, means, sums, {"actor/ratio_max": ratio.detach().max()})
