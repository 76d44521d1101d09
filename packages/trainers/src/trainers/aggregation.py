"""Loss aggregation: a `[B, T]` per-token loss matrix and its mask to one scalar.

Every mode is a sum of per-token (or per-sequence) terms divided by a denominator that does NOT depend on how
the batch was split, provided the caller passes the global counts: `aggregate` over micro-batches with the
same `num_tokens` / `num_seqs` (all-reduced over the mini-batch and the DP group) sums to the full-batch
value. Without them the denominators are the real counts of this call's tensors (non-padding tokens,
non-empty sequences), never a nominal batch size.
"""

from __future__ import annotations

import enum

import torch

__all__ = ["AggMode", "aggregate", "count_nonempty_seqs", "count_tokens", "masked_mean"]


class AggMode(enum.StrEnum):
    TOKEN_MEAN = "token-mean"
    TOKEN_SUM = "token-sum"
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"


def count_tokens(mask: torch.Tensor) -> float:
    """Number of loss tokens (mask entries equal to 1) in `mask [B, T]`."""
    return float(mask.sum().item())


def count_nonempty_seqs(mask: torch.Tensor) -> float:
    """Number of rows of `mask [B, T]` with at least one loss token (padding samples have none)."""
    return float((mask.sum(dim=-1) > 0).sum().item())


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """0-dim float64 mean of `x` over `mask`'s entries (weighted by them), 0 without any; no host synchronisation
    (a metric's mean: the step reads every metric once, at its end)."""
    n = mask.sum().double()
    return torch.where(n > 0, (x * mask).sum().double() / n.clamp(min=1.0), torch.zeros_like(n))


def _check_shapes(loss_mat: torch.Tensor, mask: torch.Tensor) -> None:
    if loss_mat.dim() != 2 or loss_mat.shape != mask.shape:
        raise ValueError(
            f"aggregate: expected loss_mat and mask of the same shape [B, T], got {tuple(loss_mat.shape)} "
            f"and {tuple(mask.shape)}"
        )


def _denominator(name: str, given: float | None, local: float) -> float:
    """The caller's global count if given (must be > 0); else the local real count, floored at 1.

    The floor only matters when the local count is 0, and then every numerator term is 0 as well, so the
    result is an exact 0 (with zero gradient) instead of 0/0.
    """
    if given is None:
        return max(local, 1.0)
    if given <= 0:
        raise ValueError(f"aggregate: {name} must be > 0 when given (a global count), got {given}")
    return float(given)


def aggregate(
    loss_mat: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T], 1 = token in the loss
    mode: AggMode | str,
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregates `loss_mat` over the tokens where `mask == 1`; returns a 0-dim tensor.

    With `m = mask`, `L = loss_mat`, `S_i = Σ_t m_it·L_it` and `n_i = Σ_t m_it`:
    - `token-mean`: `Σ_i S_i / num_tokens`; default `num_tokens = Σ m` (real loss tokens).
    - `token-sum`: `Σ_i S_i`; no denominator (both counts are ignored).
    - `seq-mean-token-sum`: `Σ_{i: n_i>0} S_i / num_seqs`; default `num_seqs` = number of rows with n_i > 0.
    - `seq-mean-token-mean`: `Σ_{i: n_i>0} (S_i / n_i) / num_seqs` (same default).
    - `seq-mean-token-sum-norm`: `seq-mean-token-sum / loss_scale_factor`; default `loss_scale_factor = T`
      (this call's padded width, which varies with the split: pass a constant, e.g. the maximum response
      length, for Dr.GRPO and for split invariance).
    `num_tokens` is read only by `token-mean`; `num_seqs` only by the `seq-mean-*` modes.
    """
    _check_shapes(loss_mat, mask)
    if mode not in set(AggMode):
        raise ValueError(f"aggregate: expected mode in {[m.value for m in AggMode]}, got {mode!r}")
    mode = AggMode(mode)
    m = mask.to(loss_mat.dtype)
    seq_sums = (loss_mat * m).sum(dim=-1)  # [B]
    if mode is AggMode.TOKEN_SUM:
        return seq_sums.sum()
    if mode is AggMode.TOKEN_MEAN:
        return seq_sums.sum() / _denominator("num_tokens", num_tokens, count_tokens(mask))
    seqs = _denominator("num_seqs", num_seqs, count_nonempty_seqs(mask))
    if mode is AggMode.SEQ_MEAN_TOKEN_MEAN:
        lengths = m.sum(dim=-1)  # [B]
        return (seq_sums / lengths.clamp(min=1.0)).sum() / seqs
    total = seq_sums.sum() / seqs
    if mode is AggMode.SEQ_MEAN_TOKEN_SUM:
        return total
    scale = float(mask.shape[-1]) if loss_scale_factor is None else float(loss_scale_factor)
    if scale <= 0:
        raise ValueError(f"aggregate: loss_scale_factor must be > 0, got {loss_scale_factor}")
    return total / scale
