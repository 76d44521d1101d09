"""Off-policy correction between the trainer's log-probs and the rollout (behaviour) log-probs.

`Δ_t = log π_train(y_t) - log μ(y_t)` per token, where `π_train` is the recomputed old policy (decoupled
mode) or the current policy under no-grad (bypass mode) and `μ` the rollout engine's log-probs. Importance
weights (never differentiated) are
- token level: `w_t = exp(clamp(Δ_t, ±20))`;
- sequence level: `w_i = exp(clamp(Σ_t Δ_t, ±20))`, broadcast to the tokens of sequence i;
then either truncated `min(w, cap)` (TIS) or zeroed outside `[lo, hi]` (IcePop; the token stays in the
loss mask, so it still counts in the denominators). Rejection filters bound the ratio `π_train/μ`
per token (`exp(Δ_t)`), per sequence sum (`exp(Σ Δ_t)`) or per sequence geometric mean (`exp(mean Δ_t)`);
a failing token, or every token of a failing sequence, leaves the loss mask. All filters must pass.
"""

from __future__ import annotations

import torch

from trainers.algorithm.correction import CorrectionConfig, IsLevel

__all__ = ["rollout_correction"]

LOG_RATIO_CLAMP = 20.0


def _inside(band: tuple[float, ...], ratio: torch.Tensor) -> torch.Tensor:
    """Where `ratio` lies in the closed band `(lo, hi)` (checked by `CorrectionConfig`)."""
    lo, hi = band
    return (ratio >= lo) & (ratio <= hi)


def _weights(delta: torch.Tensor, m: torch.Tensor, level: IsLevel | None) -> torch.Tensor:  # [B, T]
    if level is None:
        return torch.ones_like(delta)
    if level == "token":
        return torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    seq = (delta * m).sum(-1).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B]
    return torch.exp(seq).unsqueeze(-1).expand_as(delta).clone()


def _rejection(delta: torch.Tensor, m: torch.Tensor, cfg: CorrectionConfig) -> torch.Tensor:  # [B, T]
    keep = m > 0
    if cfg.reject_token:
        keep &= _inside(cfg.reject_token, torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))
    seq_sum = (delta * m).sum(-1)  # [B]
    if cfg.reject_seq_sum:
        keep &= _inside(cfg.reject_seq_sum, torch.exp(seq_sum.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)))[:, None]
    if cfg.reject_seq_mean:
        seq_mean = seq_sum / m.sum(-1).clamp(min=1.0)
        keep &= _inside(cfg.reject_seq_mean, torch.exp(seq_mean))[:, None]
    return keep.to(m.dtype)


def _weight_metrics(
    w_raw: torch.Tensor, w: torch.Tensor, m: torch.Tensor, level: IsLevel | None
) -> dict[str, torch.Tensor]:
    """IS statistics over loss tokens (token level) or non-empty sequences (sequence level); 0-dim float64. The
    selection is done with masks (no data-dependent shapes), so nothing here waits for the device."""
    if level == "sequence":
        sel = (m.sum(-1) > 0).to(torch.float64)  # [B]
        raw, units = w_raw[:, 0], w[:, 0]
    else:
        sel = (m > 0).to(torch.float64)  # [B, T]
        raw, units = w_raw, w
    n = sel.sum()
    total = (units * sel).sum()
    sq = (units.square() * sel).sum()
    big = torch.finfo(torch.float64).max
    return {
        "rollout_corr/is_mean": total / n,
        "rollout_corr/is_max": torch.where(sel > 0, units, -big).max(),
        "rollout_corr/is_min": torch.where(sel > 0, units, big).min(),
        "rollout_corr/is_ess": torch.where(sq > 0, total.square() / (n * sq).clamp(min=1e-300), torch.zeros_like(sq)),
        "rollout_corr/is_modified_frac": ((units != raw).to(torch.float64) * sel).sum() / n,
    }


def rollout_correction(
    train_log_prob: torch.Tensor,  # [B, T]
    rollout_log_prob: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    cfg: CorrectionConfig,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Returns `(is_weights [B, T] detached and 0 off the new mask, new_mask [B, T], metrics)` (0-dim tensors).

    Metrics (over the incoming mask): IS mean/max/min/ESS (`(Σw)²/(N·Σw²)`, in (0, 1]) and the fraction of
    weights truncated or zeroed; `masked_token_frac` and `masked_seq_frac` removed by rejection; the
    rollout-vs-train mismatch `abs_diff` (mean |Δ|), `kl_k1` (mean -Δ) and `kl_k3` (mean `e^Δ - 1 - Δ`),
    both estimating `KL(μ ‖ π_train)` on tokens sampled from `μ`.
    """
    if not (train_log_prob.shape == rollout_log_prob.shape == mask.shape) or mask.dim() != 2:
        raise ValueError(
            f"rollout_correction: expected three [B, T] tensors of one shape, got {tuple(train_log_prob.shape)}, "
            f"{tuple(rollout_log_prob.shape)}, {tuple(mask.shape)}"
        )
    m = mask.detach().to(torch.float64)
    n_tok = m.sum()
    if float(n_tok) == 0:  # once per step: the only host synchronisation here
        raise ValueError("rollout_correction: expected at least one loss token, got an all-zero mask")
    delta = (train_log_prob.detach() - rollout_log_prob.detach()).to(torch.float64) * m  # [B, T]
    w_raw = _weights(delta, m, cfg.is_level)
    w = w_raw
    if cfg.is_cap:
        w = w.clamp(max=cfg.is_cap)
    if cfg.is_band:
        w = torch.where(_inside(cfg.is_band, w), w, torch.zeros_like(w))
    new_m = _rejection(delta, m, cfg)
    nonempty = m.sum(-1) > 0
    k3 = torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) - 1 - delta
    metrics = _weight_metrics(w_raw, w, m, cfg.is_level)
    rejected_seq = ((new_m.sum(-1) == 0) & nonempty).to(torch.float64)
    metrics |= {
        "rollout_corr/masked_token_frac": 1.0 - new_m.sum() / n_tok,
        "rollout_corr/masked_seq_frac": rejected_seq.sum() / nonempty.sum().clamp(min=1),
        "rollout_corr/abs_diff": (delta.abs() * m).sum() / n_tok,
        "rollout_corr/kl_k1": (-delta * m).sum() / n_tok,
        "rollout_corr/kl_k3": (k3 * m).sum() / n_tok,
    }
    dtype = train_log_prob.dtype
    return (w * new_m).to(dtype), new_m.to(mask.dtype), metrics
