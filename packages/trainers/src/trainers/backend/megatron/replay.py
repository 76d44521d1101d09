"""Router replay through Megatron-Core's own hook: each MoE router's `router_replay` (a `RouterReplay`) is asked
for the top-k of every forward (`get_replay_topk`, `moe_utils.topk_routing_with_score_function`). `MegatronRowReplay` is
a `RouterReplay` that answers per row: the recorded ids where the row's replay mask is set, Megatron's native
top-k elsewhere, and the scores gathered at the chosen ids, so the router still gets gradients.

Megatron's hidden states are sequence-first ([T, B, hidden], flattened to T*B tokens); our routing rows are
batch-first ([B, T, L, K]), so rows are transposed before they are handed over. Strict: a router asked with a
token count other than the batch's, or a MoE layer that was given rows but never asked, raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.moe.router_replay import RouterReplay
from moe_models import RouterReplay as Rows
from torch import nn

TopK = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class MegatronRowReplay(RouterReplay):
    """One MoE layer's replay: `ids` [N, K] int64 used where `mask` [N] bool is set (N = T*B, sequence-first)."""

    def __init__(self) -> None:
        super().__init__()
        RouterReplay.global_router_replay_instances.remove(self)  # driven per forward by `replaying`, not globally
        self.rows: tuple[torch.Tensor, torch.Tensor] | None = None
        self.asked = False

    def get_replay_topk(
        self,
        scores: torch.Tensor,
        topk: int,
        num_groups: int | None = None,
        group_topk: int | None = None,
        default_compute_topk: TopK | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if default_compute_topk is None:
            raise ValueError("MegatronRowReplay: Megatron passed no default top-k function")
        values, native = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        if self.rows is None:
            return values, native
        ids, mask = self.rows
        if ids.shape != native.shape:
            raise ValueError(
                f"router replay, layer {self.layer_number}: expected rows of shape "
                f"{tuple(native.shape)} (tokens, top-k), got {tuple(ids.shape)}"
            )
        self.asked = True
        chosen = torch.where(mask[:, None], ids.to(native.device), native)
        return scores.gather(1, chosen), chosen


def install_row_replay(model: nn.Module) -> list[MegatronRowReplay]:
    """Gives every MoE router of `model` a `MegatronRowReplay` (in layer order) and returns them."""
    replays = []
    for module in model.modules():
        if isinstance(module, TopKRouter):
            module.router_replay = MegatronRowReplay()
            module.router_replay.layer_number = getattr(module, "layer_number", None)
            replays.append(module.router_replay)
    if not replays:
        raise ValueError("install_row_replay: the model has no MoE router")
    return replays


@contextlib.contextmanager
def replaying(replays: list[MegatronRowReplay], rows: Rows | None) -> Iterator[None]:
    """Within the block, routers replay `rows` ([B, T, L, K] ids, [B, T] mask); None routes natively."""
    if rows is not None and rows.ids.shape[2] != len(replays):
        raise ValueError(f"router replay: expected rows for {len(replays)} MoE layers, got {rows.ids.shape[2]}")
    for layer, r in enumerate(replays):
        r.asked = False
        if rows is not None:
            ids = rows.ids[:, :, layer].transpose(0, 1).reshape(-1, rows.ids.shape[-1]).long()  # [T*B, K]
            r.rows = (ids, rows.mask.transpose(0, 1).reshape(-1))
    try:
        yield
        silent = [i for i, r in enumerate(replays) if rows is not None and not r.asked]
        if silent:
            raise RuntimeError(f"router replay: MoE layers {silent} were given rows but never routed")
    finally:
        for r in replays:
            r.rows = None
