"""The batch-invariant forward of true on-policy mode: every position is computed alone, with the same ops on
tensors of the same shapes, wherever it runs.

`invariant_step(model, token, state)` computes one position of one sequence: a single `[1, hidden]` row through
every projection, attention of that one query over the sequence's own keys so far (an explicit per-layer list),
and each routed expert applied to that one row in ascending expert order. Nothing about a step depends on other
sequences or on how many positions follow, so an engine that samples with it step by step and a trainer that
recomputes a whole sequence with it position by position (`invariant_log_probs`, with autograd) get bitwise the
same logits, log-probs and routing. The price is speed: no batching, no fused kernels (a Python loop over
positions and experts).

The log-prob of a token is `log_softmax(logits / T)` of one `[1, V]` row at the token, the native sampler's
formula (row-wise ops give the same bits whatever the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from moe_models.attention import Attention
from moe_models.model import MoEForCausalLM
from moe_models.moe import DenseMLP, SparseMoeBlock
from moe_models.rope import rotary_tables


@dataclass
class InvariantState:
    """One sequence's keys and values so far: per layer, `[t, kv_heads, head_dim]` (post-rotary keys)."""

    keys: list[torch.Tensor | None] = field(default_factory=list)
    values: list[torch.Tensor | None] = field(default_factory=list)
    length: int = 0


def _attention(
    attn: Attention, x: torch.Tensor, position: int, inv_freq: torch.Tensor, state: InvariantState, layer: int
) -> torch.Tensor:
    """x `[1, hidden]` -> `[1, hidden]`; appends this position's key and value to `state`."""
    cos, sin = rotary_tables(torch.tensor([position]), inv_freq, x.dtype)  # [1, D]
    q, k, v = attn.project(x, cos, sin)  # [1, H, D], [1, KVH, D], [1, KVH, D]
    past_k, past_v = state.keys[layer], state.values[layer]
    keys = k if past_k is None else torch.cat([past_k, k])  # [t + 1, KVH, D]
    values = v if past_v is None else torch.cat([past_v, v])
    state.keys[layer], state.values[layer] = keys, values
    k_heads = keys.transpose(0, 1).repeat_interleave(attn.group_size, dim=0)  # [H, t + 1, D]
    v_heads = values.transpose(0, 1).repeat_interleave(attn.group_size, dim=0)
    scores = torch.bmm(q.transpose(0, 1), k_heads.transpose(1, 2)) * attn.scaling  # [H, 1, t + 1]
    out = torch.bmm(torch.softmax(scores, dim=-1), v_heads)  # [H, 1, D]
    return attn.o_proj(out.transpose(0, 1).reshape(1, attn.num_heads * attn.head_dim))


def _sparse(block: SparseMoeBlock, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x `[1, hidden]` -> (out `[1, hidden]`, expert ids `[K]`), the experts summed in ascending id order."""
    weights, ids = block.gate(x)  # [1, K]
    order = torch.argsort(ids[0])
    experts = block.experts
    out = torch.zeros_like(x)
    for k in order.tolist():
        e = int(ids[0, k])
        gate, up = F.linear(x, experts.gate_up_proj[e]).chunk(2, dim=-1)
        out = out + F.linear(F.silu(gate) * up, experts.down_proj[e]) * weights[0, k].to(x.dtype)
    return out, ids[0]


def invariant_step(model: MoEForCausalLM, token: int, state: InvariantState) -> tuple[torch.Tensor, torch.Tensor]:
    """Position `state.length` of the sequence, fed `token`: (logits `[V]` float32, expert ids `[L_moe, K]`
    int64); advances `state`."""
    layers = model.model.layers
    if not state.keys:
        state.keys, state.values = [None] * len(layers), [None] * len(layers)
    h = model.model.embed_tokens(torch.tensor([token]))  # [1, hidden]
    routed = []
    inv_freq = model.model.rotary_emb.inv_freq
    for i, layer in enumerate(layers):
        h = h + _attention(layer.self_attn, layer.input_layernorm(h), state.length, inv_freq, state, i)
        x = layer.post_attention_layernorm(h)
        if isinstance(layer.mlp, DenseMLP):
            h = h + layer.mlp(x)
            continue
        out, ids = _sparse(layer.mlp, x)
        h = h + out
        routed.append(ids)
    state.length += 1
    logits = model.lm_head(model.model.norm(h))[0].float()
    top_k = model.config.num_experts_per_tok
    return logits, torch.stack(routed) if routed else torch.zeros((0, top_k), dtype=torch.int64)


def invariant_log_probs(
    model: MoEForCausalLM, ids: list[int], temperature: float = 1.0, start: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole sequence position by position: (`[T - start]` log-probs of `ids[start:]`, each under the positions
    before it, with autograd when enabled; routing `[T - 1, L_moe, K]`, row t routed input t)."""
    if not temperature > 0:
        raise ValueError(f"invariant_log_probs: expected temperature > 0, got {temperature}")
    if not 1 <= start <= len(ids):
        raise ValueError(f"invariant_log_probs: expected 1 <= start <= {len(ids)}, got {start}")
    state = InvariantState()
    picked, routed = [], []
    for t in range(len(ids) - 1):
        logits, rows = invariant_step(model, ids[t], state)
        routed.append(rows)
        if t + 1 >= start:
            picked.append((logits[None, :] / temperature).log_softmax(dim=-1)[0, ids[t + 1]])
    empty = torch.zeros((0,), dtype=torch.float32)
    return (torch.stack(picked) if picked else empty), torch.stack(routed)
