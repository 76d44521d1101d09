"""MegatronBackend: Megatron-Core's `GPTModel` built from our checkpoint (Qwen3-MoE, or DeepSeek-V3 with multi-latent
attention: `family_build`, chosen by the checkpoint's model_type), on one rank of a torch.distributed group
(experts split over the expert-parallel group, the rest replicated), with AdamW, the global grad-norm clip of
`grads`, router replay through Megatron's hook, and weights and checkpoints in our names and layout. Compute only,
like `TorchBackend`: what a step does is `trainers.step`'s, run on every rank with the same batch.

Megatron's all-gather dispatcher gathers equal token counts from every rank, so each forward pads its micro-batch
(rows and positions, masked out, routed natively) to the largest `[b, t]` of any rank's micro-batch of that
forward; tokens do not interact in the MoE layers (no capacity limit, no auxiliary loss) and padded keys are masked
in attention, so the real rows' log-probs do not depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core import parallel_state
from moe_models import RouterReplay, hf_state_dict, load_pretrained
from moe_models.log_probs import next_token_entropy, next_token_log_probs

from trainers.aggregation import masked_mean
from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel
from trainers.backend.megatron import grads
from trainers.backend.megatron.checkpoint import MegatronState
from trainers.backend.megatron.family_build import family_build
from trainers.backend.megatron.gpt import gpt_logits
from trainers.backend.megatron.replay import install_row_replay, replaying
from trainers.backend.optim_config import OptimConfig
from trainers.backend.optimised_module import OptimisedModule
from trainers.backend.protocol import LossFn, PolicyRole
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch


def init_parallel(world_size: int, expert_parallel: int, device: torch.device, seed: int) -> None:
    """Megatron's parallel state (tensor parallel 1, `expert_parallel` expert ranks) on the already initialised
    default process group; idempotent per process, and refuses a different layout."""
    from megatron.core import tensor_parallel

    if not dist.is_initialized() or dist.get_world_size() != world_size:
        got = dist.get_world_size() if dist.is_initialized() else "none"
        raise RuntimeError(f"megatron backend: expected an initialised process group of {world_size} ranks, got {got}")
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=1, expert_model_parallel_size=expert_parallel
        )
        if device.type == "cuda":
            tensor_parallel.model_parallel_cuda_manual_seed(seed)  # the RNG tracker attention forks (compat 2)
    elif parallel_state.get_expert_model_parallel_world_size() != expert_parallel:
        got = parallel_state.get_expert_model_parallel_world_size()
        raise RuntimeError(
            f"megatron backend: expected expert parallel {expert_parallel}, got Megatron initialised with {got}"
        )


class MegatronBackend(OptimisedModule):
    """Implements `trainers.backend.TrainingBackend`. `data_parallel`: this rank's place in the default process group
    (None: one process). `reference`: also build a frozen copy of the base weights (for a KL term), split the same
    way."""

    def __init__(
        self,
        checkpoint_dir: str,
        optim: OptimConfig | None = None,
        *,
        temperature: float = 1.0,
        vocab_size: int | None = None,
        data_parallel: DataParallel | None = None,
        expert_parallel: int = 1,
        reference: bool = False,
        total_steps: int | None = None,
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"MegatronBackend: expected temperature > 0, got {temperature}")
        self.dp = data_parallel
        world = 1 if data_parallel is None else data_parallel.world_size
        self._device = torch.device(device) if data_parallel is None else data_parallel.device
        init_parallel(world, expert_parallel, self._device, seed)
        base = load_pretrained(checkpoint_dir)
        self.config, hf = base.config, hf_state_dict(base)
        ep_rank = parallel_state.get_expert_model_parallel_rank()
        self.build = family_build(self.config, ep_size=expert_parallel, ep_rank=ep_rank)
        model = self.build.model(hf).to(self._device)
        super().__init__(model.train(), optim, total_steps=total_steps)
        self.temperature = temperature
        self.vocab_size = vocab_size  # the tokenizer's ids: the only ones scored (None: every row)
        self.replays = install_row_replay(model)
        state_names = [n for n in base.state_dict() if n != "lm_head.weight" or not self.config.tie_word_embeddings]
        self.checkpoint = MegatronState(self.build, [n for n, _ in base.named_parameters()], state_names)
        self.reference: torch.nn.Module | None = None
        self.reference_replays: list = []
        if reference:
            self.reference = self.build.model(hf).to(self._device)
            self.reference.eval().requires_grad_(False)
            self.reference_replays = install_row_replay(self.reference)
        named = list(model.named_parameters())
        self._dense = [p for n, p in named if not grads.is_expert(n)]
        self._experts = [p for n, p in named if grads.is_expert(n)]
        self.build_optimizer()

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def data_parallel(self) -> DataParallel | None:
        return self.dp

    # ------------------------------------------------------------------ forward
    def _forward(
        self, model: torch.nn.Module, replays: list, micro: TrainBatch, replay: bool, top_k: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """([b, t-1] float32 log-probs, [b, t-1, K] of the teacher's top-k ids when `top_k` and the batch has them,
        [b, t-1] entropies (no gradient) when `top_k`, i.e. when training)."""
        micro = micro.to(self._device)
        b, t = micro.input_ids.shape
        big_b, big_t = (b, t) if self.dp is None else self.dp.max([b, t])
        pad = (0, big_t - t, 0, big_b - b)  # F.pad order: last dim first
        ids = F.pad(micro.input_ids, pad)  # [B, T]; padding is token 0, masked out
        mask = F.pad(micro.attention_mask, pad)
        rows = None
        if replay:
            if micro.replay_ids is None or micro.replay_mask is None:
                raise ValueError("router replay: expected a batch with routing (replay_ids), got none (dense model?)")
            rows = RouterReplay(F.pad(micro.replay_ids, (0, 0, 0, 0, *pad)), F.pad(micro.replay_mask, pad))
        with replaying(replays, rows):
            logits = gpt_logits(model, ids, mask)[:b, :t]  # [b, t, V]
        at_ids = micro.teacher_top_ids if top_k else None
        log_probs, at = next_token_log_probs(
            logits, micro.input_ids, at_ids, temperature=self.temperature, vocab_size=self.vocab_size
        )
        entropy = (
            next_token_entropy(logits, temperature=self.temperature, vocab_size=self.vocab_size) if top_k else None
        )
        return log_probs, at, entropy

    @torch.no_grad()
    def log_probs(
        self, micro_batches: Sequence[TrainBatch], *, replay: bool, role: PolicyRole = "policy"
    ) -> list[torch.Tensor]:
        model, replays = self.model, self.replays
        if role == "reference":
            if self.reference is None:
                raise ValueError("log_probs(role='reference'): expected a backend built with a reference, got none")
            model, replays = self.reference, self.reference_replays
        return [self._forward(model, replays, micro, replay)[0] for micro in micro_batches]

    def forward_backward(self, micro: TrainBatch, loss_fn: LossFn, *, replay: bool) -> LossOutputs:
        log_probs, at, entropy = self._forward(self.model, self.replays, micro, replay, top_k=True)
        out = loss_fn(log_probs, at)
        out.loss.backward()  # the loss has global denominators: the batch's gradient is the sum over ranks
        means = {**out.means, "actor/entropy": masked_mean(entropy, micro.response_mask.to(self._device))}
        return LossOutputs(out.loss.detach(), means, out.sums, out.maxima)

    # ------------------------------------------------------------------ the update
    def optimizer_step(self) -> torch.Tensor:
        """Sums the gradients over the ranks that share them, clips the global norm, steps; returns the norm."""
        grads.fill_missing_grads(self._dense + self._experts)
        if self.config.pad_token_id is not None:  # our embedding's padding_idx: that row never trains
            self.model.embedding.word_embeddings.weight.grad[self.config.pad_token_id] = 0
        if self.dp is not None:
            grads.sum_grads(self._dense, None)
            if parallel_state.get_expert_data_parallel_world_size() > 1:
                grads.sum_grads(self._experts, parallel_state.get_expert_data_parallel_group())
        expert_sq = grads.squared_norm(self._experts, self._device)
        if self.build.ep_size > 1:
            dist.all_reduce(expert_sq, group=parallel_state.get_expert_model_parallel_group())
        norm = (grads.squared_norm(self._dense, self._device) + expert_sq).sqrt()
        grads.clip_(self._dense + self._experts, norm, self.grad_clip)
        lr = self.optim.lr_at(self._steps_taken(), self.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        return norm

    # ------------------------------------------------------------------ weights and checkpoints
    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """Our model's full state dict (weights with the experts all-gathered over the expert-parallel group, and
        persistent buffers such as DeepSeek-V3's `e_score_correction_bias`) by our names and in our layout, CPU
        float32, on every rank (a collective: every rank calls it)."""
        return self.checkpoint.export(self.model), self._version

    def state_dict(self) -> BackendState:
        """`TorchBackend`'s format (our parameter names and order): weights, AdamW moments and step counts, this
        rank's torch RNG. It loads into this backend at any expert-parallel size, and into `TorchBackend`."""
        return self.checkpoint.save(self.model, self.optimizer, self._version)

    def load_state_dict(self, state: BackendState) -> None:
        self.checkpoint.load(state, self.model, self.optimizer)
        self._version = state.version
