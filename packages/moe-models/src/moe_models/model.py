"""Qwen3-MoE causal LM with the parameter names of `transformers.Qwen3MoeForCausalLM` (5.x in-memory layout)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from moe_models import c_kernels
from moe_models.cached_plan import build_plan
from moe_models.config import MoEConfig
from moe_models.decode_graph import GraphLayer, compiled_decode_forward, graph_layers
from moe_models.decode_step import decode_forward
from moe_models.decode_weights import DecodeWeights, LayerWeights, decode_weights
from moe_models.decoder_layer import DecoderLayer, RoutedExperts
from moe_models.expert_kernel import moe_experts
from moe_models.kv_cache import KVCache
from moe_models.moe import Experts, TopKRouter
from moe_models.norm import RMSNorm
from moe_models.output import CausalLMOutput
from moe_models.replay import RouterReplay
from moe_models.rope import RotaryEmbedding


class MoEModel(nn.Module):
    """The decoder stack (`model.` prefix in checkpoints)."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta)


class MoEForCausalLM(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.config = config
        self.model = MoEModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.moe_layer_ids = config.moe_layer_ids
        self._decode_weights: DecodeWeights | None = None  # fused copies for the decode fast path (lazy)
        self._decode_compiled = False  # decode fast path through moe_models.decode_graph (compile_decode)
        self._kernel_threads = 2  # threads of the C kernels of the compiled path (compile_decode)
        self._graph_layers: tuple[DecodeWeights, list[GraphLayer]] | None = None  # graph inputs of _decode_weights
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, initializer_range) for projections, embeddings, experts and routers; norms at 1."""
        std = self.config.initializer_range
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear | nn.Embedding):
                    module.weight.normal_(0.0, std)
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
                elif isinstance(module, Experts):
                    module.gate_up_proj.normal_(0.0, std)
                    module.down_proj.normal_(0.0, std)
                elif isinstance(module, TopKRouter):
                    module.weight.normal_(0.0, std)
                elif isinstance(module, RMSNorm):
                    module.weight.fill_(1.0)
        self.tie_weights()

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def num_parameters(self) -> int:
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        replay: RouterReplay | None = None,
        capture_routing: bool = False,
    ) -> CausalLMOutput:
        """input_ids: [B, T] int64; attention_mask: [B, T] (1 = real token, right padding) or None.

        Positions are 0..T-1 in every row. Padding positions still run (their outputs are meaningless) and
        real tokens never see them.
        """
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: got shape {tuple(input_ids.shape)}, expected [B, T]")
        batch, seq = input_ids.shape
        cfg = self.config
        if replay is not None:
            replay.validate(batch, seq, cfg.num_moe_layers, cfg.num_experts_per_tok, cfg.num_experts)
        h = self.model.embed_tokens(input_ids)  # [B, T, hidden]
        mask = self._attention_mask(input_ids, attention_mask)  # [B, 1, T, T]
        cos, sin = self.model.rotary_emb(torch.arange(seq, device=input_ids.device), h.dtype)  # [T, D]
        routed: list[torch.Tensor] = []
        replay_mask = replay.flat_mask() if replay is not None else None
        for layer in self.model.layers:
            ordinal = len(routed)
            layer_replay = replay.layer_ids(ordinal) if replay is not None and layer.is_moe else None
            h, ids = layer(h, cos, sin, mask, layer_replay, replay_mask if layer_replay is not None else None)
            if ids is not None:
                routed.append(ids)
        logits = self.lm_head(self.model.norm(h))
        routed_experts = None
        if capture_routing:
            routed_experts = self._stack_routing(routed, batch * seq).view(
                batch, seq, len(routed), cfg.num_experts_per_tok
            )
        return CausalLMOutput(logits=logits, routed_experts=routed_experts)

    def _stack_routing(self, routed: list[torch.Tensor], num_tokens: int) -> torch.Tensor:
        """[num_tokens, L_moe, K] int64 from per-MoE-layer [num_tokens, K] ids (L_moe may be 0)."""
        if not routed:
            device = self.lm_head.weight.device
            return torch.zeros(num_tokens, 0, self.config.num_experts_per_tok, dtype=torch.int64, device=device)
        return torch.stack(routed, dim=1)

    @staticmethod
    def _attention_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        batch, seq = input_ids.shape
        pos = torch.arange(seq, device=input_ids.device)
        causal = pos[None, :] <= pos[:, None]  # [T(query), T(key)]
        if attention_mask is None:
            return causal[None, None].expand(batch, 1, seq, seq)
        if tuple(attention_mask.shape) != (batch, seq):
            raise ValueError(f"attention_mask: got shape {tuple(attention_mask.shape)}, expected {(batch, seq)}")
        allowed = causal[None, None] & attention_mask.to(torch.bool)[:, None, None, :]  # [B, 1, T, T]
        # A query with no visible key (only in all-padding rows) sees itself, keeping its softmax finite.
        diagonal = torch.eye(seq, dtype=torch.bool, device=input_ids.device)[None, None]
        return allowed | (diagonal & ~allowed.any(dim=-1, keepdim=True))

    def token_log_probs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        *,
        temperature: float = 1.0,
        replay: RouterReplay | None = None,
        capture_routing: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (log_probs [B, T-1] float32, routed [B, T, L_moe, K] or None).

        log_probs[:, t] = log_softmax(logits[:, t] / temperature)[input_ids[:, t + 1]]; entries whose target
        is padding are computed all the same (the caller masks them).
        """
        if not temperature > 0:
            raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no log-probs)")
        out = self(input_ids, attention_mask, replay=replay, capture_routing=capture_routing)
        logits = out.logits[:, :-1].float()
        if temperature != 1.0:
            logits = logits / temperature
        targets = input_ids[:, 1:, None]
        picked = logits.gather(-1, targets).squeeze(-1)  # [B, T-1]
        return picked - torch.logsumexp(logits, dim=-1), out.routed_experts

    @torch.no_grad()
    def forward_cached(
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
        long takes the decode fast path (`moe_models.decode_step`): same results to float rounding.
        """
        slots = self._check_call_shape(input_ids, slot_ids, query_lens, cache)
        if len(slots) == input_ids.numel() and cache.device.type == "cpu" and hasattr(F, "grouped_mm"):
            weights = self._decode_weights = decode_weights(self, self._decode_weights)
            args = (input_ids.to(cache.device), slot_ids.to(cache.device), slots, cache, capture_routing)
            if not self._decode_compiled:
                return decode_forward(self, weights.layers, *args)
            if self._graph_layers is None or self._graph_layers[0] is not weights:
                self._graph_layers = (weights, graph_layers(self, weights.layers))
            return compiled_decode_forward(self, self._graph_layers[1], *args)
        start_lengths = self._check_lengths(slot_ids, slots, query_lens, cache)
        cfg = self.config
        plan = build_plan(
            slot_ids.to(cache.device), query_lens, start_lengths, cfg.num_attention_heads // cfg.num_key_value_heads
        )
        h = self.model.embed_tokens(input_ids)  # [N, hidden]
        cos, sin = self.model.rotary_emb(plan.write_positions, h.dtype)  # [N, D]
        routed: list[torch.Tensor] = []
        experts = self._kernel_experts(cache)
        for i, layer in enumerate(self.model.layers):
            h, ids = layer.forward_cached(
                h, cos, sin, plan, cache.keys[i], cache.values[i], None if experts is None else experts[i]
            )
            if ids is not None:
                routed.append(ids)
        last = self.model.norm(h.index_select(0, plan.last_token_index))  # [S, hidden]
        logits = self.lm_head(last).float()
        cache.lengths.index_copy_(0, slot_ids.to(cache.device), plan.new_lengths)
        routed_experts = self._stack_routing(routed, input_ids.numel()) if capture_routing else None  # [N, L, K]
        return logits, routed_experts

    def _kernel_experts(self, cache: KVCache) -> list[RoutedExperts | None] | None:
        """Per layer, the C experts kernel over the decode weights, for prefill calls when `compile_decode` is on
        and the kernels serve these dtypes (a prompt of 8 x 32 tokens: ~3 -> ~1 ms of experts); else None."""
        if not self._decode_compiled or not c_kernels.supports(self.lm_head.weight.dtype, cache.dtype, cache.device):
            return None
        weights = self._decode_weights = decode_weights(self, self._decode_weights)
        threads = self._kernel_threads

        def layer_experts(w: LayerWeights) -> RoutedExperts | None:
            if w.down is None:
                return None  # a dense layer
            return lambda x, h, ids, gates: moe_experts(x, h, ids, gates.float(), w.gate_up, w.down, threads)

        return [layer_experts(w) for w in weights.layers]

    def compile_decode(self, enabled: bool = True, kernel_threads: int = 2) -> None:
        """Run the decode fast path through `moe_models.decode_graph` compiled by `torch.compile`, or in eager.

        With fp32 weights and cache, attention and the routed experts run in C kernels
        (`moe_models.attention_kernel`, `moe_models.expert_kernel`) on `kernel_threads` threads. Attention is bound
        by memory latency, so a second core nearly doubles it (per layer, 64 rows x 96 positions from DRAM: ~285 us
        on one thread, ~155 us on two).

        The graph takes weights and the cache as inputs, with batch size, key length and cache slots dynamic and
        the cache length static: a process compiles it once per model shape and cache length (and once more for a
        batch of 1), shared by every model object and engine of that shape, and weight updates never recompile it.
        Compiling happens at the first decode step: ~5-20 s on 2 CPU cores here (inductor's on-disk cache makes
        later processes faster). Results equal the
        eager path's to float rounding (~1e-7 in fp32); routing can differ only where two experts' router
        probabilities tie to that precision.
        """
        device = self.lm_head.weight.device
        if enabled and device.type != "cpu":
            raise ValueError(f"compile_decode: got a model on {device}, expected cpu (the fast path is CPU-only)")
        if isinstance(kernel_threads, bool) or not isinstance(kernel_threads, int) or kernel_threads < 1:
            raise ValueError(f"compile_decode: kernel_threads got {kernel_threads!r}, expected an int >= 1")
        self._decode_compiled = enabled
        self._kernel_threads = kernel_threads

    def _check_call_shape(
        self, input_ids: torch.Tensor, slot_ids: torch.Tensor, query_lens: list[int], cache: KVCache
    ) -> list[int]:
        """Validates a forward_cached call's shapes and slots (not the lengths); returns slot_ids as a list."""
        cfg = self.config
        if input_ids.dim() != 1 or slot_ids.dim() != 1:
            raise ValueError(
                f"input_ids/slot_ids: got shapes {tuple(input_ids.shape)}/{tuple(slot_ids.shape)}, expected 1-D"
            )
        if len(query_lens) != slot_ids.numel() or len(query_lens) == 0:
            raise ValueError(f"query_lens: got {len(query_lens)} entries, expected {slot_ids.numel()} (>= 1)")
        if min(query_lens) < 1 or sum(query_lens) != input_ids.numel():
            raise ValueError(
                f"query_lens: got {query_lens} (sum {sum(query_lens)}), expected entries >= 1 summing to "
                f"N={input_ids.numel()}"
            )
        if (
            cache.keys[0].shape[1:] != (cfg.num_key_value_heads, cache.max_len, cfg.head_dim)
            or len(cache.keys) != cfg.num_hidden_layers
        ):
            raise ValueError("cache: built for a different model config")
        slots = slot_ids.tolist()
        if len(set(slots)) != len(slots) or min(slots) < 0 or max(slots) >= cache.num_slots:
            raise ValueError(f"slot_ids: got {slots}, expected distinct slots in [0, {cache.num_slots})")
        return slots

    @staticmethod
    def _check_lengths(slot_ids: torch.Tensor, slots: list[int], query_lens: list[int], cache: KVCache) -> list[int]:
        """Raises ValueError if a chunk would overflow max_len; returns the slots' current lengths."""
        starts = cache.lengths[slot_ids.to(cache.device)].tolist()
        for slot, start, n in zip(slots, starts, query_lens, strict=True):
            if start + n > cache.max_len:
                raise ValueError(
                    f"slot {slot}: got {start} cached + {n} new tokens = {start + n}, expected <= max_len "
                    f"{cache.max_len}"
                )
        return starts
