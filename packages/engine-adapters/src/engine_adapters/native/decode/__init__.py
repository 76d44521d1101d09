"""The native engine's decode path over a `moe_models.MoEForCausalLM`: slot KV cache, cached forward, eager and
compiled decode steps, fused decode weights and the C kernels (`csrc/`, built at first use)."""

from engine_adapters.native.decode.cached_model import CachedModel, decode_step_unsupported
from engine_adapters.native.decode.kv_cache import KVCache

__all__ = ["CachedModel", "KVCache", "decode_step_unsupported"]
