"""TopKRouter: which k experts each token goes to, and their gate weights, for every family's routing function."""

from __future__ import annotations

import torch
from torch import nn

from moe_models.config import MoEConfig
from moe_models.forward_context import ForwardContext


class TopKRouter(nn.Module):
    """The family's routing function (`FamilyTraits.router`) over `weight` `[E, hidden]` (plus `bias` `[E]` for
    GPT-OSS and the `e_score_correction_bias` `[E]` buffer for DeepSeek):

    - `softmax`: softmax over all experts (float32; float64 for float64 input), top-k, optionally renormalised over
      the k (`norm_topk_prob`; Mixtral always);
    - `topk_softmax`: top-k of the logits, softmax over those k;
    - `sigmoid_grouped`: sigmoid scores (logits in float32); selection on scores + e_score_correction_bias, among
      the `topk_group` best of `n_group` groups (a group's score: the sum of its two best); weights the plain
      scores at the chosen ids, optionally renormalised (+1e-20), times `routed_scaling_factor`.

    Under replay the ids are forced, and the weights are always computed from the current logits at the chosen ids
    by the same formula, so the router still receives gradients.
    """

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        traits = config.traits
        self.kind = traits.router
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.n_group, self.topk_group = config.n_group, config.topk_group
        self.scaling = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))
        self.bias = nn.Parameter(torch.zeros(config.num_experts)) if traits.router_bias else None
        if self.kind == "sigmoid_grouped":
            self.register_buffer("e_score_correction_bias", torch.zeros(config.num_experts))

    def forward(
        self,
        h: torch.Tensor,
        ctx: ForwardContext | None = None,
        replay_ids: torch.Tensor | None = None,
        replay_mask: torch.Tensor | None = None,
        layer: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h: [N, hidden]; replay_ids: [N, K] int64 used where replay_mask [N] is True; `ctx` runs the matmul and
        sees the logits and the choice (as layer `layer`'s `router_logits` and sorted `topk`).

        Returns (weights [N, K] in h's dtype, expert ids [N, K] int64)."""
        x, weight = (h.float(), self.weight.float()) if self.kind == "sigmoid_grouped" else (h, self.weight)
        linear = nn.functional.linear if ctx is None else ctx.linear
        logits = linear(x, weight, self.bias)  # [N, E]
        ids, probs = self._choose(logits, ctx)  # [N, K], [N, E] or None
        if replay_ids is not None:
            if replay_mask is None:
                raise ValueError("TopKRouter: replay_ids given without replay_mask")
            ids = torch.where(replay_mask[:, None], replay_ids, ids)
        if ctx is not None and ctx.trace is not None:
            ctx.record(layer, "router_logits", logits)
            ctx.record(layer, "topk", ids.sort(dim=-1).values)
        return self._weights(logits, probs, ids).to(h.dtype), ids

    def _probs(self, logits: torch.Tensor, ctx: ForwardContext | None) -> torch.Tensor:
        if self.kind == "sigmoid_grouped":
            return torch.sigmoid(logits) if ctx is None else ctx.pointwise(torch.sigmoid, logits)
        return torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))

    def _choose(self, logits: torch.Tensor, ctx: ForwardContext | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[N, E] logits -> ([N, K] int64 expert ids, the [N, E] probabilities or scores they were chosen on)."""
        if self.kind == "topk_softmax":
            return torch.topk(logits, self.top_k, dim=-1).indices, None
        scores = self._probs(logits, ctx)
        if self.kind == "softmax":
            return torch.topk(scores, self.top_k, dim=-1).indices, scores
        choice = scores + self.e_score_correction_bias  # [N, E]
        groups = choice.view(choice.shape[0], self.n_group, -1)  # [N, G, E / G]
        group_scores = groups.topk(2, dim=-1).values.sum(dim=-1)  # [N, G]
        best = torch.topk(group_scores, self.topk_group, dim=-1, sorted=False).indices  # [N, topk_group]
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)  # [N, G]
        choice = choice.masked_fill(~keep[:, :, None].expand_as(groups).reshape_as(choice), float("-inf"))
        return torch.topk(choice, self.top_k, dim=-1, sorted=False).indices, scores

    def _weights(self, logits: torch.Tensor, probs: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor:
        """[N, K] gate weights of the chosen `ids` (float32 or wider)."""
        if probs is None:
            return torch.softmax(logits.gather(1, ids), dim=-1)
        weights = probs.gather(1, ids)
        if self.kind == "softmax":
            return weights / weights.sum(dim=-1, keepdim=True) if self.norm_topk_prob else weights
        if self.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * self.scaling
