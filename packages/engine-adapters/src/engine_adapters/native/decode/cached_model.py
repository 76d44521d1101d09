"""CachedModel: the engine's cached forward over a `moe_models.MoEForCausalLM` and the decode state it keeps.

The model stays a plain model: the cached forward reads its submodules and parameters (never changes them), and
every piece of inference state (fused decode weights, whether the decode step is compiled, the C kernels' thread
count) lives on this object.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from moe_models import MoEConfig, MoEForCausalLM

from engine_adapters.native.decode import c_kernels
from engine_adapters.native.decode.cached_forward import cached_forward, check_call_shape
from engine_adapters.native.decode.decode_graph import compiled_decode_forward
from engine_adapters.native.decode.decode_step import decode_forward
from engine_adapters.native.decode.decode_weights import DecodeWeights, LayerWeights, decode_weights
from engine_adapters.native.decode.expert_kernel import moe_experts
from engine_adapters.native.decode.kv_cache import KVCache
from engine_adapters.native.decode.slot_context import RoutedExperts


def decode_step_unsupported(config: MoEConfig) -> str:
    """Why the decode step (eager or compiled, with its fused projections and kernels) cannot run this model, or ""
    when it can: it computes GQA attention without sinks or sliding windows and SwiGLU experts without biases (Qwen3-
    and Qwen2-MoE, Mixtral without a window). Other models decode through the general cached forward."""
    traits = config.traits
    if traits.attention != "gqa":
        return "its attention is MLA (the decode step fuses GQA projections)"
    if traits.sinks or config.layer_types:
        return "its attention has sinks or sliding windows (the decode step's attention has neither)"
    if traits.experts != "swiglu" or traits.expert_bias:
        return "its experts are not bias-free SwiGLU (the decode step's expert kernels are)"
    return ""


class CachedModel:
    """A model's forward over a slot KV cache, with an eager or a `torch.compile`d decode step.

    compiled: decode calls go through `decode_graph` compiled by `torch.compile`; with fp32 weights and cache,
    attention and the routed experts run in C kernels (`attention_kernel`, `expert_kernel`) on `kernel_threads`
    threads, and prefill calls run their MoE layers' experts in the C experts kernel too. Attention is bound by
    memory latency, so a second core nearly doubles its speed.

    invariant: true on-policy mode (fp32, eager): every call runs the general cached forward with batch-invariant
    ops, so a token's logits and routing are bitwise the trainer's `invariant=True` recompute of its sequence.

    The graph takes the model, the fused weights and the cache as inputs, with batch size, key length and cache
    slots dynamic and the cache length static: a process compiles it once per model shape and cache length (and
    once more for a batch of 1), shared by every model object and engine of that shape, and weight updates never
    recompile it. Compiling happens at the first decode step and takes seconds (inductor's on-disk cache makes
    later processes faster).
    Results equal the eager path's to float rounding (~1e-7 in fp32); routing can differ only where two experts'
    router probabilities tie to that precision.

    Invariant: the fused decode weights are rebuilt whenever a parameter of the model changed since they were
    built (in-place loads, optimizer steps, re-assigned parameters; see `DecodeWeights`).
    """

    def __init__(
        self, model: MoEForCausalLM, *, compiled: bool = False, kernel_threads: int = 2, invariant: bool = False
    ) -> None:
        device = model.lm_head.weight.device
        if invariant and (compiled or model.lm_head.weight.dtype != torch.float32):
            raise ValueError(
                f"CachedModel: true on-policy mode (invariant) expects an eager fp32 model, got compiled={compiled} "
                f"and {model.lm_head.weight.dtype}"
            )
        if compiled and device.type != "cpu":
            raise ValueError(f"CachedModel: got a model on {device}, expected cpu for a compiled decode (CPU-only)")
        unsupported = decode_step_unsupported(model.config)
        if compiled and unsupported:
            raise ValueError(f"CachedModel: compiled decode got a {model.config.model_type} model: {unsupported}")
        if isinstance(kernel_threads, bool) or not isinstance(kernel_threads, int) or kernel_threads < 1:
            raise ValueError(f"CachedModel: kernel_threads got {kernel_threads!r}, expected an int >= 1")
        self.model = model
        self._compiled = bool(compiled)
        self._invariant = invariant
        self._kernel_threads = kernel_threads
        self._weights: DecodeWeights | None = None  # fused copies for the decode step (lazy)
        self._decode_step = not unsupported  # one-token calls take the decode step (else the general forward)

    @property
    def compiled(self) -> bool:
        """Whether decode calls run through the compiled graph (else the eager `decode_step`)."""
        return self._compiled

    @property
    def invariant(self) -> bool:
        """Whether every call runs batch-invariant ops (true on-policy mode): the general cached forward only, so a
        token's logits and routing are bitwise the trainer's invariant recompute of its sequence."""
        return self._invariant

    @property
    def kernel_threads(self) -> int:
        """Threads of the C kernels (compiled decode and prefill experts, fp32 only)."""
        return self._kernel_threads

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        slot_ids: torch.Tensor,
        query_lens: list[int],
        cache: KVCache,
        *,
        capture_routing: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Appends each chunk to its slot at positions cache.lengths[slot] .. +len-1 and advances the lengths.

        input_ids: [N] int64, the chunks concatenated; slot_ids: [S] distinct slots; query_lens: [S], sum N.
        Returns (logits of each chunk's last token [S, V] float32, expert ids of every input token
        [N, L_moe, K] int64 or None). Raises ValueError, changing nothing, if a chunk would overflow max_len.
        Never records gradients (the cache is mutated in place). On CPU, a call whose chunks are all one token
        long takes the decode step (`decode_step`, or `decode_graph` when compiled) where the model's family has one
        (`decode_step_unsupported`): same results to float rounding.
        """
        model = self.model
        slots = check_call_shape(model, input_ids, slot_ids, query_lens, cache)
        if self._invariant:
            return cached_forward(model, input_ids, slot_ids, slots, query_lens, cache, None, capture_routing, True)
        decode = self._decode_step and len(slots) == input_ids.numel()
        if decode and cache.device.type == "cpu" and hasattr(F, "grouped_mm"):
            weights = self._weights = decode_weights(model, self._weights)
            args = (input_ids.to(cache.device), slot_ids.to(cache.device), slots, cache, capture_routing)
            if not self._compiled:
                return decode_forward(model, weights.layers, *args)
            return compiled_decode_forward(model, weights.layers, self._kernel_threads, *args)
        experts = self._kernel_experts(cache)
        return cached_forward(model, input_ids, slot_ids, slots, query_lens, cache, experts, capture_routing)

    def _kernel_experts(self, cache: KVCache) -> list[RoutedExperts | None] | None:
        """Per layer, the C experts kernel over the decode weights, for prefill calls when compiled and the kernels
        serve these dtypes (faster than the grouped matmuls); else None."""
        if not self._compiled or not c_kernels.supports(self.model.lm_head.weight.dtype, cache.dtype, cache.device):
            return None
        weights = self._weights = decode_weights(self.model, self._weights)
        threads = self._kernel_threads

        def layer_experts(w: LayerWeights) -> RoutedExperts | None:
            if w.down is None:
                return None  # a dense layer
            return lambda x, h, ids, gates: moe_experts(x, h, ids, gates.float(), w.gate_up, w.down, threads)

        return [layer_experts(w) for w in weights.layers]
