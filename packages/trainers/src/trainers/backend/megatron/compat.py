"""Every place Megatron-Core 0.19.2 assumes CUDA (1-3) or Transformer Engine (4-5) on the path this project uses,
and what runs instead. `tests/trainers/test_trainers_megatron_compat.py` (1-3) and
`test_trainers_megatron_mla_compat.py` (4-5) pin each one: they fail when Megatron stops needing the workaround
(so it can go) and when the workaround stops working. Nothing is patched outside this module.

1. Device lookups: the RoPE module moves `inv_freq` to `torch.cuda.current_device()` on its first forward, and
   the attention and memory-buffer code allocate on it; without a driver that call raises. Without CUDA,
   `torch.cuda.current_device` is made to answer `"cpu"` (process-wide, installed by `install()`; with CUDA
   nothing is changed).
2. The RNG tracker: attention runs inside `get_cuda_rng_tracker().fork()`, which needs a tracked CUDA generator
   (`model_parallel_cuda_manual_seed` needs a driver). Dropout is off in every config built here, so on a CPU
   the tracker is one whose `fork` leaves the RNG alone (`CpuRngTracker`); `check_no_dropout` refuses a config
   that would draw random numbers inside it.
3. Not patches, choices: the causal mask is passed explicitly (the default one is built with `device="cuda"`,
   `megatron.core.transformer.utils.get_default_causal_mask`), tokens are dispatched by `allgather` (the
   `alltoall` dispatcher creates a `torch.cuda.Stream`), and every fusion (RoPE, bias-activation, softmax,
   gradient accumulation) is off.
4. Multi-latent attention without Transformer Engine: `MultiLatentAttention` builds its core attention with
   `k_channels` (the query/key head width, nope + rope) and `v_channels` (the value head width), which only
   Transformer Engine's attention accepts; the local spec's `DotProductAttention` raises TypeError on them
   (Megatron-LM issue #1589; PR #6564 is open), and would size its output by `kv_channels`. The DeepSeek-V3
   build gives its layer specs `MlaDotProductAttention` instead, which takes both widths.
5. Multi-latent attention without a query latent (`q_lora_rank` None) without Transformer Engine: with the kv
   latent normalised (`qk_layernorm`), Megatron's `QKNormConfigResolver` wants `linear_q_proj` to be a fused
   norm + linear, which only Transformer Engine has, and raises RuntimeError for the local spec's plain linear,
   though there is no query norm to fuse. `LocalMLASelfAttention` resolves that case to the spec's own plain
   linear; with a query latent it defers to Megatron's resolver.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.multi_latent_attention import MLASelfAttention, MLASelfAttentionSubmodules

_installed = False
ORIGINAL_CURRENT_DEVICE = torch.cuda.current_device  # before workaround 1 (its test restores it)


def cpu_current_device() -> str:
    return "cpu"


def check_no_dropout(config: object) -> None:
    """Workaround 2 holds only without dropout: refuse a config with any."""
    rates = {k: getattr(config, k) for k in ("hidden_dropout", "attention_dropout")}
    if any(rates.values()):
        raise ValueError(f"megatron on CPU: expected hidden_dropout = attention_dropout = 0, got {rates}")


def install() -> None:
    """Applies workarounds 1 and 2 in this process when torch sees no CUDA device; idempotent."""
    global _installed
    if _installed or torch.cuda.is_available():
        return
    from megatron.core.tensor_parallel import random as mrandom

    class CpuRngTracker(mrandom.CudaRNGStatesTracker):
        """A tracker whose `fork` does not touch any generator (no dropout runs inside it here)."""

        @contextlib.contextmanager
        def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
            yield

    torch.cuda.current_device = cpu_current_device  # type: ignore[assignment]
    mrandom._CUDA_RNG_STATE_TRACKER = CpuRngTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    _installed = True


class MlaDotProductAttention(DotProductAttention):
    """Workaround 4: the local attention with multi-latent attention's head widths. `k_channels` is the query/key
    head width (the scores' contraction; the scale is MLA's own `softmax_scale`, required with it), `v_channels`
    the value head width, which sizes the output [s, b, heads * v_channels]. Without either it is the plain local
    attention: Megatron's `Attention.__init__` builds one that way before `MultiLatentAttention` replaces it."""

    def __init__(
        self,
        config: object,
        layer_number: int,
        attn_mask_type: object,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
        cp_comm_type: str | None = None,
        pg_collection: object = None,
    ) -> None:
        widths = (k_channels, v_channels)
        if widths != (None, None) and (softmax_scale is None or None in widths):
            got = {"softmax_scale": softmax_scale, "k_channels": k_channels, "v_channels": v_channels}
            raise ValueError(f"MlaDotProductAttention: expected MLA's softmax_scale, k_channels, v_channels, got {got}")
        super().__init__(
            config,  # type: ignore[arg-type]
            layer_number,
            attn_mask_type,  # type: ignore[arg-type]
            attention_type,
            attention_dropout=attention_dropout,
            softmax_scale=softmax_scale,
            cp_comm_type=cp_comm_type,
            pg_collection=pg_collection,  # type: ignore[arg-type]
        )
        if k_channels is not None and v_channels is not None:
            self.hidden_size_per_attention_head = k_channels
            self.hidden_size_per_partition = v_channels * self.num_attention_heads_per_partition


class LocalMLASelfAttention(MLASelfAttention):
    """Workaround 5: MLA from the local spec when `q_lora_rank` is None (no query latent, so no query norm)."""

    def _resolve_qk_norm_config(self, submodules: MLASelfAttentionSubmodules) -> dict[str, object]:
        if self.config.q_lora_rank is not None:
            return super()._resolve_qk_norm_config(submodules)
        if submodules.q_layernorm not in (None, IdentityOp) or submodules.linear_q_proj is None:
            got = (submodules.q_layernorm, submodules.linear_q_proj)
            raise ValueError(f"LocalMLASelfAttention: expected no q_layernorm and a linear_q_proj, got {got}")
        return {
            "linear_q_proj": submodules.linear_q_proj,
            "linear_q_up_proj": IdentityOp,
            "linear_kv_up_proj": submodules.linear_kv_up_proj,
            "q_layernorm": IdentityOp,
            "kv_layernorm": submodules.kv_layernorm if self.config.qk_layernorm else IdentityOp,
        }
