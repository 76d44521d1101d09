"""The Megatron backend behind `StepRunner` (rank processes of its own): PPO steps with router replay follow the
torch backend's at expert parallel 1 and 2 (and, for Qwen3-MoE, with the experts replicated over two ranks), for
Qwen3-MoE and for DeepSeek-V3 (multi-latent attention), also with a KL term to the frozen reference; a checkpoint of
either family resumes bit for bit, is in our names and layout (DeepSeek's router bias included), and loads into the
torch backend. Needs the `megatron` group, Python >= 3.12: `bash scripts/test_megatron.sh`."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import load_pretrained, load_state_dict_tensors
from trainers.algorithm import KLConfig, PPOConfig
from trainers.backend import BackendState, OptimConfig
from trainers.backend.config import MegatronBackendConfig, TorchBackendConfig
from trainers.step_runner import build_steps
from trainers.step_spec import StepSpec
from trainers_fixtures import rank_batch, rank_spec

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
]

STEPS = 3
LR = 1e-3  # small: AdamW's first steps move a weight by ~lr whatever its gradient's rounding


def _spec(tmp_path: Path, kl_coef: float = 0.0, model_type: str = "qwen3_moe") -> StepSpec:
    algorithm = PPOConfig(kl=KLConfig(coef=kl_coef))
    return rank_spec(tmp_path, algorithm, OptimConfig(lr=LR), model_type=model_type, router_replay=True)


def _assert_metrics_match(got: list[dict[str, float]], want: list[dict[str, float]]) -> None:
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.keys() == w.keys()
        for key, value in w.items():
            assert g[key] == pytest.approx(value, rel=1e-4, abs=1e-6), (step, key)


def _run(
    cfg: object, spec: StepSpec, steps: int, model_type: str = "qwen3_moe"
) -> tuple[list[dict[str, float]], dict[str, torch.Tensor]]:
    runner = build_steps(cfg, spec)  # type: ignore[arg-type]
    try:
        metrics = [runner.train_step(rank_batch(model_type)).metrics for _ in range(steps)]
        return metrics, runner.export_weights()[0]
    finally:
        runner.close()


@pytest.mark.parametrize(
    ("model_type", "ranks", "expert_parallel"),
    [
        ("qwen3_moe", 1, 1),
        ("qwen3_moe", 2, 2),
        ("qwen3_moe", 2, 1),
        ("deepseek_v3", 1, 1),
        ("deepseek_v3", 2, 2),
    ],
)
def test_megatron_steps_follow_the_torch_backend(
    tmp_path: Path, model_type: str, ranks: int, expert_parallel: int
) -> None:
    torch.set_num_threads(1)
    spec = _spec(tmp_path, model_type=model_type)
    want, want_weights = _run(TorchBackendConfig(device="cpu"), spec, STEPS, model_type)
    megatron = MegatronBackendConfig(ranks=ranks, expert_parallel=expert_parallel)
    got, weights = _run(megatron, spec, STEPS, model_type)
    assert want[0]["actor/grad_norm"] > 0.1  # the steps do move the weights
    _assert_metrics_match(got, want)
    assert weights.keys() == want_weights.keys()  # our names, nothing left over
    for name, value in want_weights.items():
        # AdamW moves an element by about lr a step whatever its gradient's size, so an element whose gradient is
        # rounding noise may move either way (on an AVX-512 VM one v_proj element of 4,096 ended 1.08e-4 off after
        # 3 steps): all but 0.1% of each tensor within 1e-4, none beyond what AdamW could move it in the steps
        diff = (weights[name] - value).abs()
        assert float(diff.max()) <= 2 * LR * STEPS, (name, float(diff.max()))
        assert int((diff > 10 * LR * 1e-2).sum()) <= max(1, diff.numel() // 1000), (name, int((diff > 1e-4).sum()))


def test_a_kl_term_scores_the_frozen_reference_on_expert_parallel_ranks(tmp_path: Path) -> None:
    """One step only: the reference's and the policy's forwards see other batch shapes on the ranks (padding to
    the ranks' largest micro-batch), so the KL gradient at ratio 1 is rounding noise rather than 0, and AdamW turns
    noise on near-zero gradients into +-lr moves; later steps then differ by 1e-3 to 3e-3 relative (measured)."""
    spec = _spec(tmp_path, kl_coef=0.1)
    want, _ = _run(TorchBackendConfig(device="cpu"), spec, 1)
    got, _ = _run(MegatronBackendConfig(ranks=2, expert_parallel=2), spec, 1)
    assert want[0]["actor/kl_loss"] > 1e-3  # the second mini-batch is scored against a moved policy
    _assert_metrics_match(got, want)


@pytest.mark.parametrize("model_type", ["qwen3_moe", "deepseek_v3"])
def test_a_megatron_checkpoint_resumes_bit_for_bit_and_loads_into_the_torch_backend(
    tmp_path: Path, model_type: str
) -> None:
    spec, cfg = _spec(tmp_path, model_type=model_type), MegatronBackendConfig(ranks=2, expert_parallel=2)
    batch = rank_batch(model_type)
    group = build_steps(cfg, spec)
    try:
        group.train_step(batch)
        group.state_dict().save(tmp_path / "state")
        want = [group.train_step(batch).metrics for _ in range(2)]
        want_weights, version = group.export_weights()
    finally:
        group.close()
    state = BackendState.load(tmp_path / "state")
    resumed = build_steps(cfg, spec)
    try:
        resumed.load_state_dict(state)
        got = [resumed.train_step(batch).metrics for _ in range(2)]
        got_weights, got_version = resumed.export_weights()
    finally:
        resumed.close()
    assert got == want and got_version == version == 3
    assert all(torch.equal(got_weights[k], want_weights[k]) for k in want_weights)
    ours = load_pretrained(spec.checkpoint_dir)  # the exported weights load back into our model (the engines') exactly
    load_state_dict_tensors(ours, want_weights)
    assert ours.state_dict().keys() == want_weights.keys()
    assert all(torch.equal(v, want_weights[k]) for k, v in ours.state_dict().items())

    local = build_steps(TorchBackendConfig(device="cpu"), spec)  # the same format as the torch backend's
    local.load_state_dict(state)
    loaded, _ = local.export_weights()
    assert loaded.keys() == want_weights.keys()  # every weight and buffer of our model (DeepSeek: the router bias)
    assert all(torch.equal(loaded[k], state.tensors[f"model.{k}"]) for k in loaded)
    first = local.train_step(batch).metrics
    for key, value in want[0].items():
        assert first[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (scripts/gpu_check_megatron.sh)")
def test_megatron_steps_on_cuda_follow_the_torch_backend_on_cuda(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    want, _ = _run(TorchBackendConfig(device="cuda"), spec, STEPS)
    got, _ = _run(MegatronBackendConfig(ranks=1, expert_parallel=1, device="cuda"), spec, STEPS)
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for key, value in w.items():
            assert g[key] == pytest.approx(value, rel=1e-3, abs=1e-5), (step, key)
