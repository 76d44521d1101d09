"""Single-sample KL estimators between the policy and a reference policy, per token.

With `lr = log π - log π_ref` on the sampled token `y ~ π`, each estimator's expectation under `π` relates
to `KL(π ‖ π_ref)`:
- `k1` / `kl`: `lr` (unbiased value, high variance, can be negative);
- `abs`: `|lr|`;
- `k2` / `mse`: `½·lr²` (biased value; its gradient through `log π` is unbiased for `∇KL(π ‖ π_ref)`);
- `k3` / `low_var_kl`: `exp(-lr) + lr - 1` (unbiased, non-negative); `-lr` is clamped to ±20 and the
  result to [-10, 10].
A `+` suffix (`k1+`, `k3+`, ...) is straight-through: the forward value of the named estimator with the
gradient of `k2`, i.e. `k2 + sg(kN - k2)`.
"""

from __future__ import annotations

import torch

from trainers.aggregation import AggMode, aggregate

__all__ = ["KL_KINDS", "kl_estimate", "kl_loss", "kl_penalty_rewards"]

LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0
_ALIASES = {"k1": "k1", "kl": "k1", "abs": "abs", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}
KL_KINDS: tuple[str, ...] = tuple(_ALIASES) + tuple(f"{k}+" for k in _ALIASES)


def _base(kind: str) -> tuple[str, bool]:
    straight_through = kind.endswith("+")
    name = _ALIASES.get(kind[:-1] if straight_through else kind)
    if name is None:
        raise ValueError(f"kl kind: expected one of {KL_KINDS}, got {kind!r}")
    return name, straight_through


def _value(name: str, lr: torch.Tensor) -> torch.Tensor:
    if name == "k1":
        return lr
    if name == "abs":
        return lr.abs()
    if name == "k2":
        return 0.5 * lr.square()
    neg = (-lr).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (torch.exp(neg) - neg - 1).clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def kl_estimate(
    log_prob: torch.Tensor,  # [B, T] log π(y_t)
    ref_log_prob: torch.Tensor,  # [B, T] log π_ref(y_t)
    kind: str,
) -> torch.Tensor:  # [B, T]
    """Per-token KL estimate of the named kind (see the module docstring); not masked."""
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"kl_estimate: expected log_prob and ref_log_prob of one shape, got {tuple(log_prob.shape)} and "
            f"{tuple(ref_log_prob.shape)}"
        )
    name, straight_through = _base(kind)
    lr = log_prob - ref_log_prob
    value = _value(name, lr)
    if not straight_through:
        return value
    k2 = _value("k2", lr)
    return k2 + (value - k2).detach()


def kl_penalty_rewards(
    token_rewards: torch.Tensor,  # [B, T]
    log_prob_old: torch.Tensor,  # [B, T]
    ref_log_prob: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    kind: str,
    coef: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL in the reward: `r_t - coef·kl_t(old, ref)·mask_t` (detached). Metrics (0-dim tensors): the masked mean
    KL and the coefficient."""
    kl = kl_estimate(log_prob_old.detach(), ref_log_prob.detach(), kind) * mask  # [B, T]
    n = mask.sum().double().clamp(min=1.0)
    metrics = {"kl_penalty/kl_mean": kl.sum().double() / n, "kl_penalty/coef": torch.tensor(float(coef))}
    return token_rewards - coef * kl, metrics


def kl_loss(
    log_prob: torch.Tensor,  # [B, T]
    ref_log_prob: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    *,
    kind: str = "low_var_kl",
    agg_mode: AggMode | str = AggMode.TOKEN_MEAN,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The KL loss term (to be scaled by its coefficient by the caller), aggregated like the policy loss.
    Metric: `actor/kl_loss` (the unscaled term, a 0-dim tensor)."""
    kl = kl_estimate(log_prob, ref_log_prob.detach(), kind)
    loss = aggregate(kl, mask, agg_mode, num_tokens=num_tokens, num_seqs=num_seqs, loss_scale_factor=loss_scale_factor)
    return loss, {"actor/kl_loss": loss.detach()}
