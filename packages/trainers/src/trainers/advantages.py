"""Advantage estimators: GRPO, Dr.GRPO, RLOO, REINFORCE++ (and its group baseline), GAE.

Tensors are right-padded: token tensors are `[B, T]` with `mask [B, T]` (1 = token in the loss, 0 = padding
or a tool/observation token), outcome scores are `[B]`. Group statistics are computed in float64 and cast
back to the input dtype. Singleton groups keep the raw score (GRPO and RLOO: `A = s`): there is no other
sample to compare with, and a zero advantage would silently drop the sample.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

__all__ = [
    "broadcast_to_tokens",
    "gae",
    "grpo_advantages",
    "masked_whiten",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "reinforce_pp_returns",
    "rloo_advantages",
]

WHITEN_EPS = 1e-8  # added to the variance before the inverse square root


def _groups(group_ids: Sequence[Hashable], batch: int) -> list[list[int]]:
    """Row indices of each group, in order of first appearance."""
    if len(group_ids) != batch:
        raise ValueError(f"group_ids: expected {batch} entries (one per score), got {len(group_ids)}")
    index: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        index.setdefault(g, []).append(i)
    return list(index.values())


def _check_scores(scores: torch.Tensor) -> None:
    if scores.dim() != 1:
        raise ValueError(f"scores: expected shape [B], got {tuple(scores.shape)}")


def _check_tokens(name: str, x: torch.Tensor, mask: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape != mask.shape:
        raise ValueError(f"{name}: expected shape [B, T] equal to mask's {tuple(mask.shape)}, got {tuple(x.shape)}")


def grpo_advantages(
    scores: torch.Tensor,  # [B]
    group_ids: Sequence[Hashable],
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:  # [B]
    """GRPO: `A_i = (s_i - mean_g) / (std_g + eps)` with the unbiased (ddof 1) std of the group.

    `norm_by_std=False` is Dr.GRPO (`A_i = s_i - mean_g`). A singleton group has mean 0 and std 1, so
    `A = s`. A group whose scores are all equal gets exactly 0 (not a rounding residue divided by eps).
    """
    _check_scores(scores)
    s = scores.detach().to(torch.float64)
    out = torch.zeros_like(s)
    for rows in _groups(group_ids, s.shape[0]):
        g = s[rows]
        if len(rows) == 1:
            out[rows] = g
            continue
        if bool((g == g[0]).all()):
            continue
        centred = g - g.mean()
        out[rows] = centred / (g.std(unbiased=True) + eps) if norm_by_std else centred
    return out.to(scores.dtype)


def rloo_advantages(scores: torch.Tensor, group_ids: Sequence[Hashable]) -> torch.Tensor:  # [B] -> [B]
    """RLOO: `A_i = s_i - mean_{j != i, j in g} s_j = n/(n-1)·(s_i - mean_g)`; a singleton keeps `s_i`."""
    _check_scores(scores)
    s = scores.detach().to(torch.float64)
    out = torch.zeros_like(s)
    for rows in _groups(group_ids, s.shape[0]):
        g = s[rows]
        n = len(rows)
        out[rows] = g if n == 1 else g - (g.sum() - g) / (n - 1)
    return out.to(scores.dtype)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, *, shift_mean: bool = True) -> torch.Tensor:
    """`(x - mean) / sqrt(var + 1e-8)` with the mean and unbiased variance over `mask == 1` entries.

    Entries where `mask == 0` are transformed too but carry no meaning. `shift_mean=False` adds the mean
    back (scale only). Needs at least 2 masked entries (the unbiased variance).
    """
    if x.shape != mask.shape:
        raise ValueError(f"masked_whiten: expected x and mask of one shape, got {tuple(x.shape)}, {tuple(mask.shape)}")
    m = mask.to(x.dtype)
    n = float(m.sum())
    if n < 2:
        raise ValueError(f"masked_whiten: expected at least 2 masked entries for an unbiased variance, got {n}")
    mean = (x * m).sum() / n
    var = (((x - mean) ** 2) * m).sum() / (n - 1)
    out = (x - mean) * torch.rsqrt(var + WHITEN_EPS)
    return out if shift_mean else out + mean


def broadcast_to_tokens(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:  # [B], [B, T] -> [B, T]
    """Each sequence's scalar advantage on each of its loss tokens; 0 elsewhere."""
    _check_scores(adv)
    if mask.dim() != 2 or mask.shape[0] != adv.shape[0]:
        raise ValueError(f"mask: expected shape [{adv.shape[0]}, T], got {tuple(mask.shape)}")
    return adv.unsqueeze(-1) * mask.to(adv.dtype)


def reinforce_pp_returns(
    token_rewards: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    gamma: float = 1.0,
) -> torch.Tensor:  # [B, T]
    """Discounted returns `G_t = r_t + γ·G_{t'}` where `t'` is the next loss token after `t`.

    Mask-0 tokens (tool/observation tokens, right padding) are skipped: the running return passes through
    them unchanged (no discount step, their rewards are ignored) and their returned entry is 0.
    """
    _check_tokens("token_rewards", token_rewards, mask)
    m = mask.to(token_rewards.dtype)
    running = torch.zeros_like(token_rewards[:, 0])
    out = torch.zeros_like(token_rewards)
    for t in reversed(range(token_rewards.shape[1])):
        step = token_rewards[:, t] + gamma * running
        running = m[:, t] * step + (1 - m[:, t]) * running
        out[:, t] = running * m[:, t]
    return out


def reinforce_pp_advantages(
    token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:  # [B, T]
    """REINFORCE++: batch-whitened returns, zero on mask-0 tokens."""
    return masked_whiten(reinforce_pp_returns(token_rewards, mask, gamma), mask) * mask


def reinforce_pp_baseline_advantages(
    scores: torch.Tensor,  # [B]
    group_ids: Sequence[Hashable],
    mask: torch.Tensor,  # [B, T]
) -> torch.Tensor:  # [B, T]
    """REINFORCE++ with a group baseline: `s - mean_g` (a singleton keeps `s`), broadcast, batch-whitened."""
    _check_scores(scores)
    s = scores.detach().to(torch.float64)
    centred = torch.zeros_like(s)
    for rows in _groups(group_ids, s.shape[0]):
        g = s[rows]
        centred[rows] = g if len(rows) == 1 else g - g.mean()
    tokens = broadcast_to_tokens(centred.to(scores.dtype), mask)
    return masked_whiten(tokens, mask) * mask


def gae(
    token_rewards: torch.Tensor,  # [B, T]
    values: torch.Tensor | None,  # [B, T]; None = no critic (all values 0)
    mask: torch.Tensor,  # [B, T]
    gamma: float = 1.0,
    lam: float = 1.0,
    *,
    whiten: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:  # advantages [B, T], returns [B, T]
    """Generalised advantage estimation by a reverse scan over loss tokens.

    `δ_t = r_t + γ·V_next - V_t`, `A_t = δ_t + γλ·A_next`, where "next" is the next loss token: on mask-0
    tokens the next value and the running advantage pass through unchanged. `returns = A + V` before
    whitening; then `A` is masked-whitened over the batch (`whiten=True`). Both outputs are 0 on mask-0
    tokens. The value after the last token is 0.
    """
    _check_tokens("token_rewards", token_rewards, mask)
    v = torch.zeros_like(token_rewards) if values is None else values.detach()
    _check_tokens("values", v, mask)
    m = mask.to(token_rewards.dtype)
    next_value = torch.zeros_like(token_rewards[:, 0])
    running = torch.zeros_like(token_rewards[:, 0])
    adv = torch.zeros_like(token_rewards)
    for t in reversed(range(token_rewards.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - v[:, t]
        step = delta + gamma * lam * running
        running = m[:, t] * step + (1 - m[:, t]) * running
        next_value = m[:, t] * v[:, t] + (1 - m[:, t]) * next_value
        adv[:, t] = running
    returns = (adv + v) * m
    adv = masked_whiten(adv, mask) if whiten else adv
    return adv * m, returns
