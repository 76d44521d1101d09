"""Data parallelism over `torch.distributed` (gloo on CPU, nccl on GPU) with FSDP2 `fully_shard`.

Every rank receives the same global batch and trains on its share of each mini-batch (`rows[rank::world]`);
token and sequence counts are all-reduced, so each rank's loss is `local_sum / global_count`. FSDP2 averages
gradients over ranks, so the loss is multiplied by the world size before backward: the reduced gradient is
then exactly the one-process gradient of the whole mini-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from moe_models import MoEForCausalLM


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the default (already initialised) process group."""

    rank: int
    world_size: int

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"DataParallel: expected 0 <= rank < world_size, got rank {self.rank}, {self.world_size}")

    @classmethod
    def from_process_group(cls) -> DataParallel:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("DataParallel: expected an initialised torch.distributed process group, got none")
        return cls(dist.get_rank(), dist.get_world_size())

    def shard(self, rows: Sequence[int]) -> list[int]:
        """This rank's rows of a mini-batch; raises if some rank would get none (pad the batch to a multiple
        of world_size x mini_batches_per_step with `trainers.pad_to_multiple`)."""
        if len(rows) < self.world_size:
            raise ValueError(
                f"DataParallel.shard: expected at least {self.world_size} rows (one per rank), got {len(rows)}"
            )
        return list(rows)[self.rank :: self.world_size]

    def sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t.item())

    def max(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t.item())


def shard_model(model: MoEForCausalLM) -> None:
    """FSDP2: each decoder layer is one unit (its parameters are all-gathered for its forward), then the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def full_state_numpy(model: MoEForCausalLM) -> dict[str, np.ndarray]:
    """The unsharded weights on every rank, as numpy (the tied lm_head alias omitted, as checkpoints do)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    out = {}
    for name, tensor in state.items():
        t = tensor.detach().cpu()
        out[name] = (t.float() if t.is_floating_point() else t).numpy().copy()
    return out
