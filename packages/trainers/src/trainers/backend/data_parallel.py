"""Data parallelism over `torch.distributed` (gloo on CPU, nccl on GPU) with FSDP2 `fully_shard`.

Every rank receives the same global batch and trains on its share of each mini-batch (`rows[rank::world]`);
token and sequence counts are all-reduced, so each rank's loss is `local_sum / global_count`. FSDP2 averages
gradients over ranks, so the loss is multiplied by the world size before backward: the reduced gradient is
then exactly the one-process gradient of the whole mini-batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from moe_models import MoEForCausalLM


@dataclass(frozen=True)
class DataParallel:
    """This process's place in the default (already initialised) process group. Reductions run on `device` (an NCCL
    group only reduces CUDA tensors, gloo CPU ones)."""

    rank: int
    world_size: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"DataParallel: expected 0 <= rank < world_size, got rank {self.rank}, {self.world_size}")

    @classmethod
    def from_process_group(cls) -> DataParallel:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("DataParallel: expected an initialised torch.distributed process group, got none")
        device = (
            torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        )
        return cls(dist.get_rank(), dist.get_world_size(), device)

    def shard(self, rows: Sequence[int]) -> list[int]:
        """This rank's rows of a mini-batch; raises if some rank would get none (pad the batch to a multiple
        of world_size x mini_batches_per_step with `trainers.pad_to_multiple`)."""
        if len(rows) < self.world_size:
            raise ValueError(
                f"DataParallel.shard: expected at least {self.world_size} rows (one per rank), got {len(rows)}"
            )
        return list(rows)[self.rank :: self.world_size]

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum over ranks of `values` (any shape), on this group's device."""
        t = values.to(self.device, torch.float64, copy=True)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def max_of(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise maximum over ranks of `values` (any shape, float64), on this group's device."""
        t = values.to(self.device, torch.float64, copy=True)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t

    def union(self, names: Sequence[str]) -> list[str]:
        """The sorted union over ranks of each rank's `names` (one all-gather of Python objects)."""
        gathered: list[list[str] | None] = [None] * self.world_size
        dist.all_gather_object(gathered, sorted(names))
        return sorted({n for part in gathered for n in part or []})

    def max(self, values: Sequence[int]) -> list[int]:
        """The element-wise maximum over ranks of a list of ints (one collective)."""
        t = torch.tensor(list(values), dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [int(v) for v in t.tolist()]


def shard_model(model: MoEForCausalLM) -> None:
    """FSDP2: each decoder layer is one unit (its parameters are all-gathered for its forward), then the root."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded weights (of ours or a Hugging Face causal LM) on every rank, CPU tensors in their own dtype
    (the tied lm_head alias omitted, as checkpoints do)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in state.items()}
