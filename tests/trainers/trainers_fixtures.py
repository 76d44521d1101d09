"""Shared by the trainers test modules: a tiny MoE, rollouts sampled from it with append-only routing rows (as an
engine records them, so no engine is needed), and one-line builders of a backend, an algorithm and a step."""

from __future__ import annotations

from pathlib import Path

import torch
from moe_models import MoEConfig, MoEForCausalLM, save_pretrained
from routing_state import RoutingSpec, RoutingTrace
from trainers import TrainBatch, TrainLoopConfig, TrainSample, collate, pad_to_multiple, train_step
from trainers.algorithm import Algorithm, AlgorithmConfig, DecoupledConfig, GSPOConfig, OPDConfig, PPOConfig
from trainers.algorithm.build import build_algorithm
from trainers.backend import OptimConfig, TorchBackend
from trainers.step import StepResult
from trainers.step_spec import StepSpec

VOCAB = 24
PAD = 0
MAX_NEW = 8


# DeepSeek-V3's tiny preset at the sizes above: multi-latent attention (a query latent, a value head narrower than
# the query/key head), one dense layer then two MoE layers, 8 experts in 2 groups (top-2 from the best group), one
# shared expert
MLA_SIZES = {
    "num_hidden_layers": 3,
    "q_lora_rank": 32,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 12,
    "shared_expert_intermediate_size": 32,
}


def tiny_model(seed: int = 0, model_type: str = "qwen3_moe") -> MoEForCausalLM:
    """Qwen3-MoE (2 layers) or DeepSeek-V3 (`MLA_SIZES`, with a router correction bias and router weights spread
    enough that the bias and the group limit change some choices)."""
    torch.manual_seed(seed)
    sizes = {"hidden_size": 64, "intermediate_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 2}
    if model_type == "deepseek_v3":
        sizes.update(MLA_SIZES)
    cfg = MoEConfig.preset("tiny", vocab_size=VOCAB, model_type=model_type, pad_token_id=PAD, **sizes)
    model = MoEForCausalLM(cfg)
    if model_type == "deepseek_v3":
        with torch.no_grad():
            for name, tensor in model.state_dict(keep_vars=True).items():
                if name.endswith("mlp.gate.weight"):
                    tensor.normal_(0.0, 0.5)
                elif name.endswith("mlp.gate.e_score_correction_bias"):
                    tensor.uniform_(-0.1, 0.1)
    return model


@torch.no_grad()
def sample_one(model: MoEForCausalLM, prompt: list[int], max_new: int, gen: torch.Generator) -> TrainSample:
    """Samples `max_new` tokens at temperature 1, recording each token's log-prob and routing rows append-only."""
    cfg = model.config
    trace = RoutingTrace(RoutingSpec(cfg.num_moe_layers, cfg.num_experts_per_tok, cfg.num_experts))
    ids, log_probs = list(prompt), []
    for _ in range(max_new):
        out = model(torch.tensor([ids]), capture_routing=True)
        logp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        token = int(torch.multinomial(logp.exp(), 1, generator=gen))
        trace.extend(out.routed_experts[0].numpy(), version=0, start=0)
        ids.append(token)
        log_probs.append(float(logp[token]))
    response = ids[len(prompt) :]
    return TrainSample(
        uid=f"u{len(prompt)}-{gen.initial_seed()}-{response}",
        group_id=str(prompt),
        data_source="toy",
        prompt_ids=list(prompt),
        response_ids=response,
        loss_mask=[1] * len(response),
        rollout_log_probs=log_probs,
        token_versions=[0] * len(response),
        reward=float(sum(response) % 3 == 0),
        routing=trace,
    )


def rollouts(model: MoEForCausalLM, num_prompts: int = 4, per_prompt: int = 3, seed: int = 0) -> list[TrainSample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for p in range(num_prompts):
        prompt = [1 + (p + k) % (VOCAB - 1) for k in range(3 + p % 3)]
        out.extend(sample_one(model, prompt, max_new=3 + (p % 2) * 3, gen=gen) for _ in range(per_prompt))
    return out


def backend(model: MoEForCausalLM, *, reference: bool = False, **optim: float) -> TorchBackend:
    cfg = OptimConfig(**{"lr": 1e-2, **optim})  # type: ignore[arg-type]
    if reference:
        return TorchBackend.with_reference(model, cfg)
    return TorchBackend(model, cfg)


def algorithm(kind: str = "ppo", **fields: object) -> Algorithm:
    cls = {"ppo": PPOConfig, "gspo": GSPOConfig, "decoupled": DecoupledConfig, "opd": OPDConfig}[kind]
    return build_algorithm(cls(**fields), max_new_tokens=MAX_NEW)  # type: ignore[arg-type]


def step(b: TorchBackend, batch: TrainBatch, alg: Algorithm | None = None, **loop: object) -> StepResult:
    cfg = TrainLoopConfig(**{"mismatch_sample_seqs": 4, **loop})  # type: ignore[arg-type]
    return train_step(b, alg or algorithm(), batch, cfg)


def grads(model: MoEForCausalLM) -> dict[str, torch.Tensor]:
    """The (clipped) gradient of the step's last optimiser step."""
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def rank_batch(model_type: str = "qwen3_moe") -> TrainBatch:
    """Eight rollouts of another model of the family (seed 1: their routing differs from the policy's), padded to a
    multiple of 8 (two ranks x two mini-batches)."""
    samples = rollouts(tiny_model(seed=1, model_type=model_type), num_prompts=4, per_prompt=2)
    return collate(pad_to_multiple(samples, 8, pad_token_id=PAD), PAD)


def rank_spec(
    tmp_path: Path, algorithm: AlgorithmConfig, optim: OptimConfig, model_type: str = "qwen3_moe", **loop: object
) -> StepSpec:
    """What rank processes build from: `tiny_model()` of the family saved under `tmp_path/ckpt` (once), 2
    mini-batches a step."""
    ckpt = tmp_path / "ckpt"
    if not ckpt.exists():
        save_pretrained(tiny_model(model_type=model_type), ckpt)
    cfg = TrainLoopConfig(**{"mini_batches_per_step": 2, "micro_batch_tokens": 30, "mismatch_sample_seqs": 2, **loop})
    return StepSpec(str(ckpt), algorithm, cfg, optim, max_new_tokens=MAX_NEW, temperature=1.0, seed=0, total_steps=8)
