"""Every place VeOmni 0.1.12 assumes CUDA, and what this backend does instead; nothing is patched elsewhere.
`tests/trainers_veomni/test_veomni_compat.py` pins each one: it fails when VeOmni stops needing the workaround
(so it can go) or when the workaround stops working.

1. The process group: VeOmni's `get_dist_comm_backend()` raises without CUDA/NPU/MLU, and its trainer base asks it
   for the backend. We never use VeOmni's trainer; `init_process_group` (gloo on CPU, nccl on GPU) runs first,
   then `init_parallel_state(..., device_type=...)`, which only builds the device mesh over that group.
2. The ops: VeOmni's default kernels are Triton/Liger ones (`fused_triton` experts, `liger_kernel` norms and
   cross-entropy, a `triton` load-balancing loss; FP8 QAT needs SM90). On CPU every op is set to `eager`, which is
   Hugging Face's reference math (so the forward matches our `MoEForCausalLM` to float rounding).
3. One rank: `build_parallelize_model` refuses a model initialised on the CPU unless FSDP shards it (world > 1),
   and at one rank it would only apply gradient checkpointing (off here). So at one rank the model is built on the
   CPU with its weights and not passed to it; at more ranks it is built on `meta` and VeOmni's FSDP2 loads the
   weights shard by shard.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn


def eager_ops() -> object:
    """VeOmni's `OpsImplementationConfig` with every op on its eager (Hugging Face) path (workaround 2)."""
    from veomni.arguments.arguments_types import OpsImplementationConfig

    return OpsImplementationConfig(
        attn_implementation="eager",
        moe_implementation="eager",
        cross_entropy_loss_implementation="eager",
        rms_norm_implementation="eager",
        swiglu_mlp_implementation="eager",
        rotary_pos_emb_implementation="eager",
        load_balancing_loss_implementation="eager",
        qat_implementation="none",
    )


def init_parallel(world_size: int, device_type: str) -> None:
    """VeOmni's parallel state (FSDP2 data parallel over every rank) on the already initialised default process
    group (workaround 1). Idempotent per process."""
    import torch.distributed as dist
    from veomni.distributed.parallel_state import init_parallel_state

    if not dist.is_initialized():
        raise RuntimeError("veomni backend: expected torch.distributed to be initialised first (gloo or nccl)")
    if dist.get_world_size() != world_size:
        raise ValueError(f"veomni backend: expected a process group of {world_size} ranks, got {dist.get_world_size()}")
    init_parallel_state(dp_size=world_size, dp_shard_size=world_size, dp_mode="fsdp2", device_type=device_type)


def build_model(checkpoint_dir: str, world_size: int, *, shard: bool = True) -> nn.Module:
    """A Hugging Face-format Qwen3-MoE checkpoint as VeOmni's model in float32 with eager ops, trainable; sharded
    with VeOmni's FSDP2 when `shard` and `world_size > 1` (workaround 3). `shard=False`: a full copy (a frozen
    reference)."""
    from veomni.distributed.torch_parallelize import MixedPrecisionConfig, build_parallelize_model
    from veomni.models import build_foundation_model

    sharded = shard and world_size > 1
    init = "meta" if sharded else "cpu"
    model = build_foundation_model(
        checkpoint_dir, checkpoint_dir, torch_dtype="float32", init_device=init, ops_implementation=eager_ops()
    )
    if sharded:
        model = build_parallelize_model(
            model,
            weights_path=checkpoint_dir,
            init_device="meta",
            mixed_precision=MixedPrecisionConfig(enable=False),
            enable_gradient_checkpointing=False,
        )
    return model
