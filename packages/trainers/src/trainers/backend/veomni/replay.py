"""Our routing rows through VeOmni's router-replay hook (`veomni.utils.moe_router_replay`).

VeOmni's patched Qwen3-MoE block calls the active manager's `on_router_forward(router, scores, native_ids)` once
per MoE layer per forward and routes with the ids it returns (gate weights re-gathered from the current softmax,
so the router keeps its gradient). `VeOmniRowReplay` returns the recorded ids on rows whose mask is set and the native
ids elsewhere: a row without a record (a pad, an observation, the final position) routes natively, never to a
filler expert.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from moe_models import RouterReplay
from torch import nn


def moe_routers(model: nn.Module) -> list[nn.Module]:
    """The routers (`mlp.gate`) of VeOmni's Qwen3-MoE, in MoE-ordinal order (dense layers skipped). Raises (VeOmni's
    own check) unless VeOmni wires its replay hook into the model's family."""
    from veomni.utils.moe_router_replay import validate_model_for_replay

    validate_model_for_replay(model)
    layers = model.model.layers  # type: ignore[union-attr]
    return [layer.mlp.gate for layer in layers if hasattr(layer.mlp, "experts")]  # type: ignore[union-attr]


class VeOmniRowReplay:
    """One forward's replay: `routing` ids `[B, T, L_moe, K]` and mask `[B, T]`; router identity is the module,
    mapped to its MoE ordinal up front (so activation recompute replays the same rows). Strict: a router that is not
    the model's, a token count that is not `B * T`, or a forward that does not fire every router raises."""

    def __init__(self, routers: list[nn.Module], routing: RouterReplay) -> None:
        self.ordinal = {id(r): i for i, r in enumerate(routers)}
        self.routing = routing
        self.fired: set[int] = set()

    def on_router_forward(
        self, module: nn.Module, routing_scores: torch.Tensor, top_indices: torch.Tensor
    ) -> torch.Tensor:
        """`top_indices` `[N, K]` native -> `[N, K]`: recorded where the row's mask is set, native elsewhere."""
        ordinal = self.ordinal.get(id(module))
        if ordinal is None:
            raise ValueError(
                f"VeOmniRowReplay: got a router that is not one of the model's {len(self.ordinal)} MoE routers"
            )
        recorded = self.routing.layer_ids(ordinal).to(top_indices.device)  # [B*T, K]
        if recorded.shape != top_indices.shape:
            raise ValueError(
                f"VeOmniRowReplay: MoE layer {ordinal} routed {tuple(top_indices.shape)} tokens x k, expected "
                f"{tuple(recorded.shape)} from the routing rows"
            )
        self.fired.add(ordinal)
        mask = self.routing.flat_mask().to(top_indices.device)[:, None]  # [B*T, 1]
        return torch.where(mask, recorded.to(top_indices.dtype), top_indices)

    def check_complete(self) -> None:
        if len(self.fired) != len(self.ordinal):
            missing = sorted(set(range(len(self.ordinal))) - self.fired)
            raise ValueError(
                f"VeOmniRowReplay: MoE layers {missing} never consulted the replay hook in this forward "
                "(expected VeOmni's patched Qwen3-MoE block, which calls it)"
            )


@contextmanager
def replaying(routers: list[nn.Module], routing: RouterReplay | None) -> Iterator[None]:
    """VeOmni's hook active for the body (routing None: native routing, no manager installed)."""
    from veomni.utils.moe_router_replay import get_active_replay, set_active_replay

    if routing is None:
        yield
        return
    if get_active_replay() is not None:
        raise RuntimeError("VeOmniRowReplay: another router-replay manager is active in this process")
    manager = VeOmniRowReplay(routers, routing)
    set_active_replay(manager)
    try:
        yield
    finally:
        set_active_replay(None)
    manager.check_complete()
