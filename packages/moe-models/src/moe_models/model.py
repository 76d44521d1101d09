"""The MoE causal LM of every supported family, with the parameter names of `transformers.Qwen3MoeForCausalLM` (5.x
in-memory layout); `moe_models.families` maps them to and from each family's own names."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from moe_models.attention import Attention
from moe_models.config import MoEConfig
from moe_models.decoder_layer import DecoderLayer
from moe_models.forward_context import ForwardContext, TraceHook
from moe_models.grid_context import GridContext
from moe_models.head_log_probs import head_log_probs
from moe_models.moe import Experts
from moe_models.norm import RMSNorm
from moe_models.output import CausalLMOutput, TokenScores
from moe_models.replay import RouterReplay
from moe_models.rope import RotaryEmbedding
from moe_models.router import TopKRouter
from moe_models.shared_prefix import prefix_owners
from moe_models.token_layout import TokenLayout


class MoEModel(nn.Module):
    """The decoder stack (`model.` prefix in checkpoints)."""

    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, config.traits.norm_weight_first)
        self.rotary_emb = RotaryEmbedding(config)


class MoEForCausalLM(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.config = config
        self.model = MoEModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.moe_layer_ids = config.moe_layer_ids
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal(0, initializer_range) for projections, embeddings, experts, routers (and their biases) and sinks;
        other biases at 0 (as transformers initialises each family); norms at 1."""
        std = self.config.initializer_range
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear | nn.Embedding):
                    module.weight.normal_(0.0, std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    module.bias.zero_()
                if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                    module.weight[module.padding_idx].zero_()
                elif isinstance(module, Experts):
                    module.gate_up_proj.normal_(0.0, std)
                    module.down_proj.normal_(0.0, std)
                    for bias in (module.gate_up_proj_bias, module.down_proj_bias):
                        if bias is not None:
                            bias.zero_()
                elif isinstance(module, TopKRouter):
                    module.weight.normal_(0.0, std)
                    if module.bias is not None:
                        module.bias.normal_(0.0, std)
                elif isinstance(module, Attention) and module.sinks is not None:
                    module.sinks.normal_(0.0, std)
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
        logits_from: torch.Tensor | None = None,
        shared_prefix: torch.Tensor | None = None,
        invariant: bool = False,
        trace: TraceHook | None = None,
        score: HeadRequest | None = None,
    ) -> CausalLMOutput:
        """input_ids: [B, T] int64; attention_mask: [B, T] (1 = real token, right padding) or None.

        Positions are 0..T-1 in every row. Only real tokens are computed (`GridContext`: attention runs on the
        grid, every other op on the real tokens alone); padding cells of the logits and of the routing are zeros.
        The logits have `config.logit_vocab_size` columns: the head's rows beyond the tokenizer are never scored.
        `logits_from` [B] int64: the first position of each row whose logits are wanted (None: every position);
        the last layer runs only the wanted positions (the others lend it their keys and values), so the earlier
        ones' logits are zeros. Routing capture needs every position, so it excludes `logits_from`.
        `shared_prefix` [B] int64 (each within its row's real tokens, as a prompt length): a row whose first
        `shared_prefix[b]` tokens, and replayed routing there, equal an earlier row's (a GRPO group's prompt) reads
        them from that row, so they are computed once (`shared_prefix.prefix_owners`; exact, see `TokenLayout`;
        with `invariant` bit for bit: every op there gives a token the same bits whichever rows it is computed with,
        and attention still reads each row's keys in its own slots, see `SegmentGrid.of`).
        `invariant`: batch-invariant ops (`ForwardContext`); `trace`: sees every op's output.
        `score`: no logits; the output's `scores` instead (`token_log_probs_at`, which goes through this call so that
        module hooks, FSDP2's among them, run).
        """
        run = self._run(
            input_ids, attention_mask, replay, capture_routing, logits_from, shared_prefix, invariant, trace
        )
        if score is not None:
            scores = self._score(run, input_ids, attention_mask, logits_from, invariant, score)
            return CausalLMOutput(logits=None, routed_experts=run.routed_experts, scores=scores)
        logits = run.wanted.unpack(self.logits(run.hidden, run.ctx))  # [B, T, V]
        return CausalLMOutput(logits=logits, routed_experts=run.routed_experts)

    def _run(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        replay: RouterReplay | None,
        capture_routing: bool,
        logits_from: torch.Tensor | None,
        shared_prefix: torch.Tensor | None,
        invariant: bool,
        trace: TraceHook | None,
    ) -> _Run:
        """The decoder over a batch (see `forward`), up to the hidden states of the wanted tokens."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids: got shape {tuple(input_ids.shape)}, expected [B, T]")
        if capture_routing and logits_from is not None:
            raise ValueError(
                "capture_routing: expected every position's routing, got logits_from (a partial last layer)"
            )
        batch, seq = input_ids.shape
        cfg = self.config
        if replay is not None:
            replay.validate(batch, seq, cfg.num_moe_layers, cfg.num_experts_per_tok, cfg.num_experts)
        owners = None if shared_prefix is None else prefix_owners(input_ids, shared_prefix, replay)  # [B]
        layout = TokenLayout.of(input_ids, attention_mask, owners=owners, shared=shared_prefix)
        wanted = self._wanted(layout, attention_mask, logits_from)  # [M] of the N tokens, or None: all
        ctx = GridContext(
            layout,
            last_layer=cfg.num_hidden_layers - 1,
            last_layer_queries=wanted,
            replay=replay,
            owners=owners,
            shared=shared_prefix,
            invariant=invariant,
            trace=trace,
        )
        h, routed = self.decode(layout.pack(input_ids), ctx)  # [M, hidden]
        routed_experts = None
        if capture_routing:
            routed_experts = layout.unpack(self.stack_routing(routed, layout.num_tokens))  # [B, T, L_moe, K]
        return _Run(h, layout if wanted is None else layout.subset(wanted), ctx, routed_experts)

    def decode(self, input_ids: torch.Tensor, ctx: ForwardContext) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The decoder, written once for every context: input_ids [N] int64 (the context's tokens) -> (hidden
        states after the last layer [M, hidden], before the final norm, for the rows of the last layer's
        `ctx.queries`; per MoE layer, the chosen expert ids [rows of that layer, K] int64)."""
        h = self.model.embed_tokens(input_ids)  # [N, hidden]
        ctx.record(-1, "embed", h)
        cos, sin = self.model.rotary_emb(ctx.positions, h.dtype)  # [N, D]
        routed: list[torch.Tensor] = []
        for layer in self.model.layers:
            replay = ctx.replay(len(routed)) if layer.is_moe else None
            h, ids = layer(h, cos, sin, ctx, replay)
            if ids is not None:
                routed.append(ids)
        return h, routed

    def logits(self, h: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """lm_head(norm(h)): h [M, hidden] from `decode` -> [M, V] in the model's dtype, V =
        `config.logit_vocab_size` (the head's rows of the tokenizer's ids)."""
        logits = ctx.linear(self.model.norm(h), self.head_weight())
        ctx.record(self.config.num_hidden_layers, "logits", logits)
        return logits

    def head_weight(self) -> torch.Tensor:
        """`[V, hidden]`: the head's rows that score tokens, V = `config.logit_vocab_size` (a view: its gradient
        reaches `lm_head.weight`, whose padding rows beyond V get none)."""
        return self.lm_head.weight[: self.config.logit_vocab_size]

    @staticmethod
    def _wanted(
        layout: TokenLayout, attention_mask: torch.Tensor | None, logits_from: torch.Tensor | None
    ) -> torch.Tensor | None:
        """[M] int64 indices (of the layout's N tokens) read by a real cell at or after its row's `logits_from`;
        None: all."""
        if logits_from is None:
            return None
        if tuple(logits_from.shape) != (layout.batch,):
            raise ValueError(f"logits_from: got shape {tuple(logits_from.shape)}, expected {(layout.batch,)}")
        device = layout.positions.device
        cols = torch.arange(layout.seq, device=device)
        cells = cols[None, :] >= logits_from.to(device)[:, None]  # [B, T]
        if attention_mask is not None:
            cells = cells & attention_mask.to(device=device, dtype=torch.bool)
        return layout.tokens_of_cells(cells.reshape(-1))

    def stack_routing(self, routed: list[torch.Tensor], num_tokens: int) -> torch.Tensor:
        """[num_tokens, L_moe, K] int64 from per-MoE-layer [num_tokens, K] ids (L_moe may be 0)."""
        if not routed:
            device = self.lm_head.weight.device
            return torch.zeros(num_tokens, 0, self.config.num_experts_per_tok, dtype=torch.int64, device=device)
        return torch.stack(routed, dim=1)

    def token_log_probs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        *,
        temperature: float = 1.0,
        replay: RouterReplay | None = None,
        capture_routing: bool = False,
        invariant: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns (log_probs [B, T-1] float32, routed [B, T, L_moe, K] or None).

        log_probs[:, t] = log_softmax(logits[:, t] / temperature)[input_ids[:, t + 1]] where both positions are
        real tokens, 0 elsewhere. `invariant`: batch-invariant ops and the sampler's log-prob formula (true
        on-policy mode: bitwise the native engine's sampled log-probs).
        """
        scores = self.token_log_probs_at(
            input_ids,
            attention_mask,
            None,
            temperature=temperature,
            replay=replay,
            capture_routing=capture_routing,
            invariant=invariant,
        )
        return scores.log_probs, scores.routed_experts

    def token_log_probs_at(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        at_ids: torch.Tensor | None,
        *,
        temperature: float = 1.0,
        replay: RouterReplay | None = None,
        capture_routing: bool = False,
        logits_from: torch.Tensor | None = None,
        shared_prefix: torch.Tensor | None = None,
        invariant: bool = False,
        with_entropy: bool = False,
        top_k: int = 0,
        log_softmax: bool = False,
    ) -> TokenScores:
        """`token_log_probs`, plus the log-probs of other tokens at every row: `at_ids` `[B, T-1, K]` int64 gives
        `at[:, t, k] = log_softmax(logits[:, t] / temperature)[at_ids[:, t, k]]` (None: no extra ids), and with
        `with_entropy` each row's entropy and with `top_k` its k most likely ids and their log-probs (no gradient).
        Scored entries are those whose position and next position
        are real tokens, from `logits_from` on (as in `forward`); every other entry is 0. The logits are never
        materialised: the head runs on the scored positions' hidden states a chunk at a time, forward and backward
        (`moe_models.head_log_probs`). `shared_prefix` as in `forward` (the rows' log-probs are unchanged by it, to
        float rounding); `invariant` as in `token_log_probs` (`at` keeps the plain formula)."""
        if not temperature > 0:
            raise ValueError(f"temperature: got {temperature}, expected > 0 (greedy has no log-probs)")
        batch, seq = input_ids.shape
        if at_ids is not None and tuple(at_ids.shape[:2]) != (batch, seq - 1):
            want = (batch, seq - 1)
            raise ValueError(f"at_ids: expected shape [B, T-1, K] = {want} + [K], got {tuple(at_ids.shape)}")
        request = HeadRequest(at_ids, temperature, with_entropy, top_k, log_softmax or invariant)
        out = self(
            input_ids,
            attention_mask,
            replay=replay,
            capture_routing=capture_routing,
            logits_from=logits_from,
            shared_prefix=shared_prefix,
            invariant=invariant,
            score=request,
        )
        assert out.scores is not None
        return out.scores

    def _score(
        self,
        run: _Run,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        logits_from: torch.Tensor | None,
        invariant: bool,
        request: HeadRequest,
    ) -> TokenScores:
        """The head over the scored cells of `run` (see `token_log_probs_at`)."""
        batch, seq = input_ids.shape
        cells = _scored_cells(input_ids, attention_mask, logits_from)  # [C] flat indices into [B, T-1]
        rows, cols = cells // (seq - 1), cells % (seq - 1)
        head = head_log_probs(
            self.model.norm(run.hidden),
            self.lm_head.weight,
            run.wanted.cell_tokens().index_select(0, rows * seq + cols),
            input_ids[rows, cols + 1],
            temperature=request.temperature,
            at_ids=None if request.at_ids is None else request.at_ids[rows, cols],
            linear=run.ctx.linear,
            log_softmax=request.log_softmax,
            with_entropy=request.with_entropy,
            top_k=request.top_k,
            vocab=self.config.logit_vocab_size,
            entropy_layout=(batch * (seq - 1), cells),  # the grid itself: the backward fills it
        )

        def grid(values: torch.Tensor | None) -> torch.Tensor | None:
            return None if values is None else _on_grid(values, cells, batch, seq - 1)

        return TokenScores(
            grid(head.log_probs),  # type: ignore[arg-type]
            grid(head.at),
            None if head.entropy is None else head.entropy.view(batch, seq - 1),
            run.routed_experts,
            grid(head.top_ids),
            grid(head.top_log_probs),
        )


@dataclass(frozen=True)
class HeadRequest:
    """What `forward(score=...)` computes instead of logits (see `token_log_probs_at`)."""

    at_ids: torch.Tensor | None
    temperature: float
    with_entropy: bool
    top_k: int
    log_softmax: bool


@dataclass(frozen=True)
class _Run:
    """The decoder's output for a batch: `hidden` `[M, hidden]` (before the final norm) of the wanted tokens,
    `wanted` their layout, the forward's context and the captured routing."""

    hidden: torch.Tensor
    wanted: TokenLayout
    ctx: GridContext
    routed_experts: torch.Tensor | None


def _scored_cells(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, logits_from: torch.Tensor | None
) -> torch.Tensor:
    """`[C]` int64 flat indices into the shifted `[B, T-1]` grid of the entries that score a real next token from
    `logits_from` on."""
    batch, seq = input_ids.shape
    device = input_ids.device
    real = torch.ones(batch, seq, dtype=torch.bool, device=device)
    if attention_mask is not None:
        real = attention_mask.to(device=device, dtype=torch.bool)
    scored = real[:, :-1] & real[:, 1:]  # [B, T-1]
    if logits_from is not None:
        cols = torch.arange(seq - 1, device=device)
        scored = scored & (cols[None, :] >= logits_from.to(device)[:, None])
    return scored.reshape(-1).nonzero().squeeze(1)


def _on_grid(values: torch.Tensor, cells: torch.Tensor, batch: int, width: int) -> torch.Tensor:
    """Per-cell values `[C, ...]` placed on the `[B, width, ...]` grid, zeros elsewhere (the gradient flows back)."""
    out = values.new_zeros(batch * width, *values.shape[1:])
    return out.index_copy(0, cells, values).view(batch, width, *values.shape[1:])
