"""The native engine's decode path over a `moe_models.MoEForCausalLM`: slot KV cache, cached forward, eager and
compiled decode steps, fused decode weights and the C kernels (`csrc/`, built at first use)."""

from native_engine.decode.cached_model import CachedModel, decode_step_unsupported
from native_engine.decode.kv_cache import KVCache

__all__ = ["CachedModel", "KVCache", "decode_step_unsupported"]
