"""Policy-gradient losses: PPO clip (with dual clip), decoupled PPO, GSPO.

Three policies have names here: the behaviour policy `μ` that sampled the tokens (the rollout log-probs), the
proximal policy `π_prox` that anchors the trust region (the recomputed "old" log-probs; in bypass mode it is `μ`
itself), and the current policy `π_θ` being optimised (the only input with a gradient). All tensors are `[B, T]`,
right-padded, with `mask [B, T]`; log-probs are natural logs of the sampled tokens. Every function returns
`(loss, metrics)`: a 0-dim loss and 0-dim metric tensors (detached, float64 for means) over this call's loss
tokens, so callers never synchronise with the device per call.
"""

from __future__ import annotations

import torch

from trainers.aggregation import AggMode, aggregate, masked_mean

__all__ = ["decoupled_ppo_loss", "gspo_loss", "ppo_clip_loss"]

LOG_RATIO_CLAMP = 20.0
GSPO_LOG_RATIO_CAP = 10.0


def _check(mask: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and t.shape != mask.shape:
            raise ValueError(f"{name}: expected shape {tuple(mask.shape)} (as mask), got {tuple(t.shape)}")


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # 0-dim; 0 without tokens
    m = mask.bool()
    best = x.masked_fill(~m, float("-inf")).max()
    return torch.where(m.any(), best, torch.zeros_like(best))


def _clip_losses(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(max(-A·r, -A·clip(r)), indicator that the clipped term is strictly larger)`."""
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"clip range: expected 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).to(ratio.dtype)


def ppo_clip_loss(
    log_prob: torch.Tensor,  # [B, T] log π_θ
    old_log_prob: torch.Tensor,  # [B, T] log π_old (proximal)
    advantages: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
    agg_mode: AggMode | str = AggMode.TOKEN_MEAN,
    is_weights: torch.Tensor | None = None,  # [B, T], detached before use
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate `max(-A·r, -A·clip(r, 1-ε_low, 1+ε_high))`, `r = exp(clamp(lp - old, ±20))`.

    Dual clip (`dual_clip_c = c > 1`, None = off): for `A < 0` the loss is capped at `-A·c`. The per-token
    loss is multiplied by `is_weights` (rollout IS weights, never differentiated) and aggregated with
    `agg_mode` (`loss_scale_factor`: the constant divisor of `seq-mean-token-sum-norm`). Metrics:
    `pg_clipfrac` (clipped term active), `pg_clipfrac_lower` (dual cap active), `ppo_kl = mean(old - lp)`,
    `ratio_mean`, `ratio_max`, `pg_loss`.
    """
    _check(mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages, is_weights=is_weights)
    if dual_clip_c is not None and dual_clip_c <= 1:
        raise ValueError(f"dual_clip_c: expected > 1 or None, got {dual_clip_c}")
    m = mask.to(log_prob.dtype)
    log_ratio = (log_prob - old_log_prob.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    adv = advantages.detach()
    losses, clipped = _clip_losses(ratio, adv, clip_low, clip_high)
    lower = torch.zeros_like(losses)
    if dual_clip_c is not None:
        cap = -adv * dual_clip_c
        lower = ((losses > cap) & (adv < 0)).to(losses.dtype)
        losses = torch.where(adv < 0, torch.minimum(losses, cap), losses)
    if is_weights is not None:
        losses = losses * is_weights.detach()
    loss = aggregate(losses, m, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, loss_scale_factor=loss_scale_factor)
    metrics = {
        "actor/pg_loss": loss.detach(),
        "actor/pg_clipfrac": masked_mean(clipped, m),
        "actor/pg_clipfrac_lower": masked_mean(lower, m),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), m),
        "actor/ratio_mean": masked_mean(ratio.detach(), m),
        "actor/ratio_max": _masked_max(ratio.detach(), m),
    }
    return loss, metrics


def decoupled_ppo_loss(
    log_prob: torch.Tensor,  # [B, T] log π_θ (current)
    proximal_log_prob: torch.Tensor,  # [B, T] log π_prox
    behaviour_log_prob: torch.Tensor,  # [B, T] log μ (rollout)
    advantages: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    *,
    is_cap: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = 3.0,
    agg_mode: AggMode | str = AggMode.TOKEN_MEAN,
    is_weights: torch.Tensor | None = None,  # [B, T] further weights (rollout correction), detached
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Decoupled PPO (AReaL): `E[(π_prox/μ)·min(r·A, clip(r)·A)]` with `r = π_θ/π_prox`.

    Exactly `ppo_clip_loss(old = π_prox, is_weights = exp(clamp(log π_prox - log μ, ±20)))`, the weights
    truncated at `is_cap` when given (TIS) and multiplied by `is_weights` when given. The other keywords are
    `ppo_clip_loss`'s.
    """
    _check(mask, proximal_log_prob=proximal_log_prob, behaviour_log_prob=behaviour_log_prob)
    log_w = (proximal_log_prob - behaviour_log_prob).detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    weights = torch.exp(log_w)
    if is_cap is not None:
        weights = weights.clamp(max=is_cap)
    behaviour = weights
    if is_weights is not None:
        weights = weights * is_weights.detach()
    loss, metrics = ppo_clip_loss(
        log_prob,
        proximal_log_prob,
        advantages,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip_c=dual_clip_c,
        agg_mode=agg_mode,
        is_weights=weights,
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        loss_scale_factor=loss_scale_factor,
    )
    metrics["actor/behaviour_is_mean"] = masked_mean(behaviour, mask.to(behaviour.dtype))
    return loss, metrics


def gspo_loss(
    log_prob: torch.Tensor,  # [B, T] log π_θ
    old_log_prob: torch.Tensor,  # [B, T] log π_old
    advantages: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    is_weights: torch.Tensor | None = None,
    num_seqs: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO: the PPO clip on a sequence-level ratio, aggregated with `seq-mean-token-mean` (forced).

    `ρ_i = mean_t (lp - old)` over sequence i's loss tokens; the per-token surrogate
    `s_t = exp(lp_t - sg(lp_t) + sg(ρ_i))` has the value `exp(ρ_i)` (log capped at 10) and the gradient
    `s_t·∇lp_t`. Defaults are the GSPO paper's clip range (3e-4, 4e-4). `pg_clipfrac_lower` is 0 (no dual
    clip).
    """
    _check(mask, log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages, is_weights=is_weights)
    m = mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob.detach()  # [B, T]
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # [B]
    log_s = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(log_s.clamp(max=GSPO_LOG_RATIO_CAP))  # [B, T]
    losses, clipped = _clip_losses(ratio, advantages.detach(), clip_low, clip_high)
    if is_weights is not None:
        losses = losses * is_weights.detach()
    loss = aggregate(losses, m, AggMode.SEQ_MEAN_TOKEN_MEAN, num_seqs=num_seqs)
    metrics = {
        "actor/pg_loss": loss.detach(),
        "actor/pg_clipfrac": masked_mean(clipped, m),
        "actor/pg_clipfrac_lower": torch.zeros((), dtype=torch.float64, device=loss.device),
        "actor/ppo_kl": masked_mean(-log_ratio.detach(), m),
        "actor/ratio_mean": masked_mean(ratio.detach(), m),
        "actor/ratio_max": _masked_max(ratio.detach(), m),
    }
    return loss, metrics
