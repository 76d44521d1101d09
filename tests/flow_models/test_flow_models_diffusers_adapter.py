"""`SD3Velocity` on a tiny locally built `SD3Transformer2DModel`: our sampler over it equals diffusers' own sampling,
its log-probs equal hand-computed densities and a Flow-GRPO reference step driven by diffusers' scheduler, and it
agrees with our `VelocityMLP` path on a shared case."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from flow_models.diffusers_adapter import SD3Velocity, random_prompt_embeddings, tiny_sd3_transformer
from flow_models.sampler import VelocityFn, sample, window_log_prob
from flow_models.sampler_config import SamplerConfig, SdeKind
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from torch import nn

NUM_CLASSES = 3
LABELS = torch.tensor([0, 2, 1, 2])
ModelOutput = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # (latents, timestep [b], labels)


@pytest.fixture(scope="module")
def adapter() -> SD3Velocity:
    return SD3Velocity.with_random_prompts(tiny_sd3_transformer(0), NUM_CLASSES, seq_len=4, seed=1)


def initial_noise(seed: int, channels: int = 4) -> torch.Tensor:
    return torch.randn((len(LABELS), channels, 8, 8), generator=torch.Generator().manual_seed(seed))


def diffusers_output(adapter: SD3Velocity) -> ModelOutput:
    """The transformer called as the SD3 pipeline calls it: `timestep` straight from `scheduler.timesteps`."""

    def call(latents: torch.Tensor, timestep: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return adapter.transformer(
            hidden_states=latents,
            timestep=timestep,
            return_dict=False,
            encoder_hidden_states=adapter.encoder_hidden_states[labels],
            pooled_projections=adapter.pooled_projections[labels],
        )[0]

    return call


def random_velocity_mlp(seed: int, channels: int = 4) -> VelocityMLP:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VelocityMLP(
            VelocityConfig(image_size=8, channels=channels, num_classes=NUM_CLASSES, hidden=32, depth=2)
        )
        torch.nn.init.normal_(model.out.weight, std=0.1)
        torch.nn.init.normal_(model.out.bias, std=0.1)
    return model.eval()


@torch.no_grad()
def test_ode_sampler_equals_diffusers_scheduler_loop(adapter: SD3Velocity) -> None:
    noise = initial_noise(5)
    cfg = SamplerConfig(num_steps=8, shift=3.0, noise_level=0.0, window_size=0)
    ours = sample(adapter, LABELS, noise, cfg, None)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(8)
    latents, model_output = noise.clone(), diffusers_output(adapter)
    for t in scheduler.timesteps:
        latents = scheduler.step(model_output(latents, t.expand(len(LABELS)), LABELS), t, latents).prev_sample
    torch.testing.assert_close(ours.images, latents, rtol=0, atol=1e-5)
    assert float((latents - noise).abs().max()) > 0.5


@torch.no_grad()
def test_ode_sampler_equals_the_stable_diffusion_3_pipeline(adapter: SD3Velocity) -> None:
    """diffusers' real pipeline with precomputed prompt embeddings, no guidance, latents out (no text encoders, no
    VAE; its latent side is height / 8)."""
    from diffusers import StableDiffusion3Pipeline

    components = dict.fromkeys(
        ("vae", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "text_encoder_3", "tokenizer_3")
    )
    pipe = StableDiffusion3Pipeline(
        transformer=adapter.transformer, **components, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0)
    )
    pipe.set_progress_bar_config(disable=True)
    hidden, pooled = adapter.conditioning(LABELS)
    noise = initial_noise(6)
    latents = pipe(
        prompt_embeds=hidden,
        pooled_prompt_embeds=pooled,
        guidance_scale=1.0,
        num_inference_steps=6,
        latents=noise.clone(),
        height=64,
        width=64,
        output_type="latent",
    ).images
    ours = sample(adapter, LABELS, noise, SamplerConfig(num_steps=6, shift=3.0, noise_level=0.0, window_size=0), None)
    torch.testing.assert_close(ours.images, latents, rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_recomputed_window_log_probs_equal_the_rollouts(adapter: SD3Velocity, kind: SdeKind) -> None:
    cfg = SamplerConfig(num_steps=6, shift=3.0, noise_level=0.7, sde_kind=kind, window_size=2, window_lo=0, window_hi=5)
    generator = torch.Generator().manual_seed(2)
    rollout = sample(adapter, LABELS, initial_noise(3), cfg, generator, window_start=cfg.draw_window_start(generator))
    assert rollout.log_probs.shape == (len(LABELS), 2)
    for k in range(cfg.window_size):
        log_prob, _ = window_log_prob(adapter, rollout, k, cfg)
        torch.testing.assert_close(log_prob, rollout.log_probs[:, k], rtol=0, atol=1e-6)
    other = SD3Velocity(tiny_sd3_transformer(9), adapter.encoder_hidden_states, adapter.pooled_projections)
    changed = window_log_prob(other, rollout, 0, cfg)[0].detach()
    assert float((changed - rollout.log_probs[:, 0]).abs().max()) > 1e-4


@pytest.mark.parametrize("window_start", [0, 3])
@torch.no_grad()
def test_sde_log_prob_equals_a_hand_computed_gaussian_density(adapter: SD3Velocity, window_start: int) -> None:
    """One SDE step recomputed in float64 from the formulas, the velocity from the transformer called directly."""
    cfg = SamplerConfig(num_steps=6, shift=3.0, noise_level=0.7, window_size=1, window_lo=0, window_hi=6)
    rollout = sample(adapter, LABELS, initial_noise(4), cfg, torch.Generator().manual_seed(8), window_start)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(6)
    s, s_next = float(scheduler.sigmas[window_start]), float(scheduler.sigmas[window_start + 1])
    x, x_next = rollout.latents[:, 0].double(), rollout.latents[:, 1].double()
    timestep = scheduler.timesteps[window_start].expand(len(LABELS))
    v = diffusers_output(adapter)(rollout.latents[:, 0], timestep, LABELS).double()
    std_t = 0.7 * math.sqrt(s / (1 - (float(scheduler.sigmas[1]) if s == 1.0 else s)))
    dt = s_next - s
    mean = x * (1 + std_t**2 * dt / (2 * s)) + v * (1 + std_t**2 * (1 - s) / (2 * s)) * dt
    density = torch.distributions.Normal(mean, std_t * math.sqrt(-dt)).log_prob(x_next).flatten(1).mean(dim=1)
    torch.testing.assert_close(rollout.log_probs[:, 0].double(), density, rtol=0, atol=1e-5)
    assert bool(torch.isfinite(density).all())


def reference_step(
    scheduler: FlowMatchEulerDiscreteScheduler,
    model_output: torch.Tensor,
    timestep: torch.Tensor,
    sample_: torch.Tensor,
    noise_level: float,
    kind: SdeKind,
    prev_sample: torch.Tensor | None,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flow-GRPO's `sde_step_with_logprob`, written from its formulas, indexing diffusers' scheduler by timestep.
    `noise_level = 0` is the Euler step (no noise drawn). Returns (prev_sample, log_prob [b] averaged over elements)."""
    index = scheduler.index_for_timestep(timestep)
    sigma, sigma_prev, sigma_max = scheduler.sigmas[index], scheduler.sigmas[index + 1], scheduler.sigmas[1].item()
    dt = sigma_prev - sigma
    if kind == "sde":
        std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1, sigma_max, sigma))) * noise_level
        mean = (
            sample_ * (1 + std_dev_t**2 / (2 * sigma) * dt)
            + model_output * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
        )
        std = std_dev_t * torch.sqrt(-dt)
    else:
        std = sigma_prev * math.sin(noise_level * math.pi / 2)
        x0, noise_estimate = sample_ - sigma * model_output, sample_ + (1 - sigma) * model_output
        mean = x0 * (1 - sigma_prev) + noise_estimate * torch.sqrt(sigma_prev**2 - std**2)
    if noise_level == 0:
        return mean, torch.zeros(sample_.shape[0])
    if prev_sample is None:
        prev_sample = mean + std * torch.randn(sample_.shape, generator=generator, dtype=torch.float32)
    if kind == "sde":
        log_prob = -((prev_sample - mean) ** 2) / (2 * std**2) - torch.log(std) - math.log(math.sqrt(2 * math.pi))
    else:
        log_prob = -((prev_sample - mean) ** 2)
    return prev_sample, log_prob.flatten(1).mean(dim=1)


@torch.no_grad()
def reference_rollout(
    model_output: ModelOutput, noise: torch.Tensor, cfg: SamplerConfig, window: range, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The windowed Flow-GRPO chain on diffusers' scheduler: (latents [b, W + 1, ...], log_probs [b, W], images)."""
    scheduler = FlowMatchEulerDiscreteScheduler(shift=cfg.shift)
    scheduler.set_timesteps(cfg.num_steps)
    latents, stored, log_probs = noise.clone(), [], []
    for i, t in enumerate(scheduler.timesteps):
        v = model_output(latents, t.expand(len(LABELS)), LABELS)
        if i not in window:
            latents, _ = reference_step(scheduler, v, t, latents, 0.0, cfg.sde_kind, None, None)
            continue
        stored.append(latents)
        latents, log_prob = reference_step(scheduler, v, t, latents, cfg.noise_level, cfg.sde_kind, None, generator)
        log_probs.append(log_prob)
        if i == window[-1]:
            stored.append(latents)
    return torch.stack(stored, dim=1), torch.stack(log_probs, dim=1), latents


def sd3_case(adapter: SD3Velocity) -> tuple[VelocityFn, ModelOutput]:
    return adapter, diffusers_output(adapter)


def mlp_case(_: SD3Velocity) -> tuple[VelocityFn, ModelOutput]:
    mlp = random_velocity_mlp(4)
    return mlp, lambda latents, timestep, labels: mlp(latents, timestep / 1000, labels)


@pytest.mark.parametrize("case", [sd3_case, mlp_case], ids=["sd3-adapter", "velocity-mlp"])
@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_sampler_and_log_probs_equal_the_flow_grpo_reference_for_both_models(
    adapter: SD3Velocity, case: Callable[[SD3Velocity], tuple[VelocityFn, ModelOutput]], kind: SdeKind
) -> None:
    """The same `sample` + `window_log_prob` code over our MLP and over the diffusers adapter reproduces a reference
    Flow-GRPO chain (diffusers' scheduler sigmas and timesteps, the same noise stream) for each model."""
    fn, model_output = case(adapter)
    cfg = SamplerConfig(num_steps=6, shift=3.0, noise_level=0.8, sde_kind=kind, window_size=2, window_lo=0, window_hi=5)
    noise = initial_noise(11)
    rollout = sample(fn, LABELS, noise, cfg, torch.Generator().manual_seed(12), window_start=1)
    reference_generator = torch.Generator().manual_seed(12)
    latents, log_probs, images = reference_rollout(model_output, noise, cfg, range(1, 3), reference_generator)
    torch.testing.assert_close(rollout.images, images, rtol=0, atol=1e-5)
    torch.testing.assert_close(rollout.latents, latents, rtol=0, atol=1e-5)
    torch.testing.assert_close(rollout.log_probs, log_probs, rtol=0, atol=1e-5)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(6)
    for k, i in enumerate(rollout.window):
        t = scheduler.timesteps[i]
        with torch.no_grad():
            v = model_output(rollout.latents[:, k], t.expand(len(LABELS)), LABELS)
        _, expected = reference_step(scheduler, v, t, rollout.latents[:, k], 0.8, kind, rollout.latents[:, k + 1], None)
        torch.testing.assert_close(window_log_prob(fn, rollout, k, cfg)[0], expected, rtol=0, atol=1e-5)


class MlpAsSd3(nn.Module):
    """A diffusers-shaped stand-in over our `VelocityMLP`: reads the class from a one-hot pooled projection and sigma
    from `timestep / 1000`, and records the dtypes and timesteps it was called with."""

    def __init__(self, mlp: VelocityMLP, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.dtype_probe = nn.Parameter(torch.zeros(1, dtype=dtype))  # first parameter: the dtype the adapter sees
        self.mlp = mlp
        self.config = SimpleNamespace(joint_attention_dim=2, pooled_projection_dim=NUM_CLASSES, in_channels=4)
        self.calls: list[dict[str, torch.Tensor]] = []

    def forward(
        self,
        hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        pooled_projections: torch.Tensor,
        return_dict: bool,
    ) -> tuple[torch.Tensor]:
        assert not return_dict
        self.calls.append({"hidden_states": hidden_states, "timestep": timestep, "pooled": pooled_projections})
        labels = pooled_projections.argmax(dim=1)
        return (self.mlp(hidden_states.float(), timestep.float() / 1000, labels).to(hidden_states.dtype),)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_adapter_path_agrees_with_the_own_model_path_on_a_shared_model(kind: SdeKind) -> None:
    """The same `VelocityMLP`, once direct and once behind `SD3Velocity` (labels -> prompt rows, sigma -> timestep),
    gives the same rollout and log-probs; each path's recompute accepts the other's rollout."""
    mlp = random_velocity_mlp(5)
    wrapped = SD3Velocity(MlpAsSd3(mlp), torch.zeros(NUM_CLASSES, 1, 2), torch.eye(NUM_CLASSES))
    cfg = SamplerConfig(num_steps=5, shift=3.0, noise_level=0.7, sde_kind=kind, window_size=2, window_lo=0, window_hi=4)
    noise = initial_noise(13)
    direct = sample(mlp, LABELS, noise, cfg, torch.Generator().manual_seed(3), window_start=2)
    adapted = sample(wrapped, LABELS, noise, cfg, torch.Generator().manual_seed(3), window_start=2)
    torch.testing.assert_close(adapted.latents, direct.latents, rtol=0, atol=1e-5)
    torch.testing.assert_close(adapted.log_probs, direct.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(adapted.images, direct.images, rtol=0, atol=1e-5)
    for k in range(cfg.window_size):
        torch.testing.assert_close(
            window_log_prob(mlp, adapted, k, cfg)[0].detach(), adapted.log_probs[:, k], rtol=0, atol=1e-5
        )
        torch.testing.assert_close(
            window_log_prob(wrapped, direct, k, cfg)[0].detach(), direct.log_probs[:, k], rtol=0, atol=1e-5
        )
    shuffled = SD3Velocity(MlpAsSd3(mlp), torch.zeros(NUM_CLASSES, 1, 2), torch.eye(NUM_CLASSES)[[1, 2, 0]])
    assert float((sample(shuffled, LABELS, noise, cfg, None, 2).images - direct.images).abs().max()) > 1e-3


@torch.no_grad()
def test_adapter_casts_inputs_to_the_model_dtype_keeps_the_timestep_float32_and_returns_float32() -> None:
    stand_in = MlpAsSd3(random_velocity_mlp(6), dtype=torch.bfloat16)
    wrapped = SD3Velocity(stand_in, torch.zeros(NUM_CLASSES, 1, 2), torch.eye(NUM_CLASSES))
    sigma = torch.tensor([1.0, 0.8576923, 0.3, 0.0089286])
    v = wrapped(initial_noise(0), sigma, LABELS)
    call = stand_in.calls[-1]
    assert v.dtype == torch.float32 and v.shape == (len(LABELS), 4, 8, 8)
    assert call["hidden_states"].dtype == call["pooled"].dtype == torch.bfloat16
    assert call["timestep"].dtype == torch.float32
    torch.testing.assert_close(call["timestep"], sigma * 1000, rtol=0, atol=0)
    torch.testing.assert_close(call["pooled"].float(), torch.eye(NUM_CLASSES)[LABELS], rtol=0, atol=0)


@torch.no_grad()
def test_bf16_transformer_gives_float32_velocity_close_to_float32(adapter: SD3Velocity) -> None:
    half = SD3Velocity(
        tiny_sd3_transformer(0).to(torch.bfloat16), adapter.encoder_hidden_states, adapter.pooled_projections
    )
    x, sigma = initial_noise(1), torch.tensor([1.0, 0.7, 0.4, 0.1])
    full, low = adapter(x, sigma, LABELS), half(x, sigma, LABELS)
    assert low.dtype == torch.float32
    torch.testing.assert_close(low, full, rtol=0.05, atol=0.05)


@torch.no_grad()
def test_tiny_transformer_is_deterministic_per_seed_and_leaves_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    first, again, other = tiny_sd3_transformer(3), tiny_sd3_transformer(3), tiny_sd3_transformer(4)
    assert torch.equal(torch.random.get_rng_state(), state)
    weights = [torch.cat([p.flatten() for p in m.parameters()]) for m in (first, again, other)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    assert sum(p.numel() for p in first.parameters()) < 50_000 and not first.training


@torch.no_grad()
def test_single_channel_tiny_transformer_drives_the_sampler() -> None:
    velocity = SD3Velocity.with_random_prompts(tiny_sd3_transformer(2, in_channels=1), NUM_CLASSES, seed=2)
    cfg = SamplerConfig(num_steps=4, shift=1.0, noise_level=0.7, window_size=1, window_lo=0, window_hi=4)
    rollout = sample(velocity, LABELS, initial_noise(7, channels=1), cfg, torch.Generator().manual_seed(0), 3)
    assert rollout.images.shape == (len(LABELS), 1, 8, 8) and rollout.latents.shape == (len(LABELS), 2, 1, 8, 8)
    assert bool(torch.isfinite(rollout.log_probs).all())


def test_random_prompt_embeddings_are_deterministic_per_seed() -> None:
    hidden, pooled = random_prompt_embeddings(3, 5, 16, 8, seed=0)
    assert hidden.shape == (3, 5, 16) and pooled.shape == (3, 8) and hidden.dtype == torch.float32
    assert torch.equal(hidden, random_prompt_embeddings(3, 5, 16, 8, seed=0)[0])
    assert not torch.equal(hidden, random_prompt_embeddings(3, 5, 16, 8, seed=1)[0])
    with pytest.raises(ValueError, match="seq_len: expected >= 1, got 0"):
        random_prompt_embeddings(3, 0, 16, 8, seed=0)


def test_adapter_refuses_mismatched_embeddings_labels_and_latents(adapter: SD3Velocity) -> None:
    transformer, hidden, pooled = adapter.transformer, adapter.encoder_hidden_states, adapter.pooled_projections
    with pytest.raises(ValueError, match=r"expected \[num_classes, seq, 16\], got \(3, 4, 5\)"):
        SD3Velocity(transformer, hidden[..., :5], pooled)
    with pytest.raises(ValueError, match=r"pooled_projections: expected \(3, 16\), got \(2, 16\)"):
        SD3Velocity(transformer, hidden, pooled[:2])
    with pytest.raises(TypeError, match="expected a diffusers SD3Transformer2DModel"):
        SD3Velocity(nn.Linear(2, 2), hidden, pooled)
    x, sigma = initial_noise(0), torch.ones(len(LABELS))
    with pytest.raises(ValueError, match=r"expected labels in \[0, 3\), got \[0, 3\]"):
        adapter(x, sigma, torch.tensor([0, 3, 1, 1]))
    with pytest.raises(ValueError, match=r"expected x of shape \[b, 4, h, w\], got \(4, 1, 8, 8\)"):
        adapter(x[:, :1], sigma, LABELS)
    with pytest.raises(ValueError, match=r"expected sigma and labels of shape \(4,\), got \(1,\)"):
        adapter(x, sigma[:1], LABELS)


def test_flow_models_imports_without_diffusers_and_the_adapter_says_how_to_install_it() -> None:
    script = textwrap.dedent("""
        import sys
        sys.modules["diffusers"] = None  # `import diffusers` now raises ImportError
        import flow_models, flow_models.sampler, flow_models.velocity, flow_models.diffusers_adapter as adapter
        try:
            adapter.tiny_sd3_transformer(0)
        except ImportError as error:
            print("ImportError:", error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "ImportError: flow_models.diffusers_adapter needs diffusers" in result.stdout
    assert "dev dependency group" in result.stdout and "uv sync --group dev" in result.stdout
