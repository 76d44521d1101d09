"""Training-vs-rollout log-prob mismatch: how far the trainer's forward is from the engine's sampling policy."""

from __future__ import annotations

import torch

from trainers.kl import kl_estimate


def log_prob_mismatch(
    train_log_probs: torch.Tensor,  # [B, T] log π_train(y_t)
    rollout_log_probs: torch.Tensor,  # [B, T] log μ(y_t), the engine's
    mask: torch.Tensor,  # [B, T], 1 on sampled response tokens
    prefix: str,
) -> dict[str, torch.Tensor]:
    """`{prefix}/abs_diff_mean`, `{prefix}/abs_diff_max` (nats) and `{prefix}/k3` over the masked tokens.

    `k3 = exp(lr) - 1 - lr` with `lr = log π_train - log μ` estimates `KL(μ ‖ π_train)` from tokens sampled by
    μ (non-negative, unbiased). `{prefix}/tokens` is the number of tokens compared. Values are 0-dim float64
    tensors; with no masked token the count is 0 and the other values are NaN (`trainers.step_metrics` then drops
    them). Selecting the masked tokens is a data-dependent shape (one host synchronisation on a GPU per call: a
    few per step, none per micro-batch), kept because it sums exactly the tokens compared, in their order.
    """
    if train_log_probs.shape != rollout_log_probs.shape or train_log_probs.shape != mask.shape:
        raise ValueError(
            f"log_prob_mismatch: expected three tensors of one shape, got {tuple(train_log_probs.shape)}, "
            f"{tuple(rollout_log_probs.shape)}, {tuple(mask.shape)}"
        )
    sel = mask.bool()
    n = sel.sum().double()
    train = train_log_probs.detach().double()[sel]
    rollout = rollout_log_probs.detach().double()[sel]
    diff = (train - rollout).abs()
    k3 = kl_estimate(rollout, train, "k3")  # lr' = rollout - train: exp(-lr') + lr' - 1 = exp(lr) - 1 - lr
    nan = torch.full_like(n, float("nan"))
    return {
        f"{prefix}/tokens": n,
        f"{prefix}/abs_diff_mean": diff.mean() if diff.numel() else nan,
        f"{prefix}/abs_diff_max": diff.max() if diff.numel() else nan,
        f"{prefix}/k3": k3.mean() if k3.numel() else nan,
    }
