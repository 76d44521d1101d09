"""A diffusers `SD3Transformer2DModel` as a `sampler.VelocityFn`: `(x [b, c, h, w], sigma [b], labels [b]) -> v`.

Convention check (diffusers 0.42, `pipeline_stable_diffusion_3.py` and `scheduling_flow_match_euler_discrete.py`):
the pipeline calls `transformer(hidden_states=latents, timestep=t, encoder_hidden_states=prompt_embeds,
pooled_projections=pooled_prompt_embeds)` with `t = scheduler.timesteps[i] = sigma * num_train_timesteps` (a float32
tensor, whatever the transformer's dtype), and `FlowMatchEulerDiscreteScheduler.step` returns
`sample + (sigma_next - sigma) * model_output`; its `scale_noise` forms `sigma * noise + (1 - sigma) * x0`. So the
transformer's `sample` output is the velocity `noise - x0` of `schedule`'s convention, and this adapter returns it
unchanged (no sign flip, no rescaling), in float32.

Conditioning is a class label, as for our `VelocityMLP`: the adapter holds one prompt embedding per class
(`encoder_hidden_states` `[num_classes, seq, joint_attention_dim]`, `pooled_projections`
`[num_classes, pooled_projection_dim]`, e.g. precomputed by SD3's text encoders, or random from a seed for tests)
and looks them up by label. There is no classifier-free guidance here: it is one conditional forward per call.

diffusers is imported lazily (it is in the workspace's dev dependency group, not a dependency of this package), so
`import flow_models` never needs it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

INSTALL_HINT = (
    "flow_models.diffusers_adapter needs diffusers: it is in the workspace's dev dependency group; "
    "install it with `uv sync --group dev` (or `pip install 'diffusers>=0.30'`)"
)


def require_diffusers() -> Any:
    """Imports and returns the `diffusers` module, or raises an ImportError that says how to install it."""
    try:
        import diffusers
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT} (got: {error})") from error
    return diffusers


def tiny_sd3_transformer(
    seed: int,
    sample_size: int = 8,
    in_channels: int = 4,
    patch_size: int = 2,
    num_layers: int = 2,
    num_attention_heads: int = 2,
    attention_head_dim: int = 8,
    joint_attention_dim: int = 16,
    pooled_projection_dim: int = 16,
) -> nn.Module:
    """A few-thousand-parameter `SD3Transformer2DModel` (float32, eval mode) built from a local config, no hub.

    Weights come from diffusers' default initialisation under `torch.manual_seed(seed)` inside a forked RNG
    state (the global RNG is left untouched), so the same arguments give the same weights. `sample_size` is the
    latent side in pixels and must be a multiple of `patch_size`; `out_channels = in_channels`.
    """
    diffusers = require_diffusers()
    if sample_size < patch_size or sample_size % patch_size:
        raise ValueError(
            f"tiny_sd3_transformer: expected sample_size a positive multiple of patch_size "
            f"({patch_size}), got {sample_size}"
        )
    inner_dim = num_attention_heads * attention_head_dim
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = diffusers.SD3Transformer2DModel(
            sample_size=sample_size,
            patch_size=patch_size,
            in_channels=in_channels,
            num_layers=num_layers,
            attention_head_dim=attention_head_dim,
            num_attention_heads=num_attention_heads,
            joint_attention_dim=joint_attention_dim,
            caption_projection_dim=inner_dim,
            pooled_projection_dim=pooled_projection_dim,
            out_channels=in_channels,
            pos_embed_max_size=sample_size // patch_size,
        )
    return model.eval()


def random_prompt_embeddings(
    num_classes: int, seq_len: int, joint_attention_dim: int, pooled_projection_dim: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic stand-in prompt embeddings: standard normal float32 `[num_classes, seq_len, joint_dim]` and
    `[num_classes, pooled_dim]` from a CPU generator seeded with `seed`."""
    sizes = {
        "num_classes": num_classes,
        "seq_len": seq_len,
        "joint_attention_dim": joint_attention_dim,
        "pooled_projection_dim": pooled_projection_dim,
    }
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"random_prompt_embeddings.{name}: expected >= 1, got {value}")
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn((num_classes, seq_len, joint_attention_dim), generator=generator, dtype=torch.float32)
    pooled = torch.randn((num_classes, pooled_projection_dim), generator=generator, dtype=torch.float32)
    return hidden, pooled


def _config_int(transformer: nn.Module, name: str) -> int:
    config = getattr(transformer, "config", None)
    value = getattr(config, name, None)
    if value is None:
        raise TypeError(
            f"SD3Velocity: expected a diffusers SD3Transformer2DModel (a `config.{name}`), got "
            f"{type(transformer).__name__}"
        )
    return int(value)


def _model_dtype(module: nn.Module) -> torch.dtype:
    for parameter in module.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch.float32


class SD3Velocity(nn.Module):
    """`forward(x [b, c, h, w], sigma [b] float32 in [0, 1], labels [b] long in [0, num_classes)) -> v [b, c, h, w]`
    float32, the velocity `noise - x0`.

    The transformer is a submodule (so `parameters()`, `.to()`, `.train()` reach it and gradients flow through it);
    the prompt embeddings are float32 buffers (not trained), cast to the transformer's dtype per call, as are the
    latents. The timestep `sigma * num_train_timesteps` stays float32, as the SD3 pipeline passes it (bf16 would
    round 1000 * sigma to ~3 significant digits); the transformer embeds it in float32 itself.
    """

    def __init__(
        self,
        transformer: nn.Module,
        encoder_hidden_states: torch.Tensor,
        pooled_projections: torch.Tensor,
        num_train_timesteps: int = 1000,
    ) -> None:
        require_diffusers()
        super().__init__()
        joint_dim = _config_int(transformer, "joint_attention_dim")
        pooled_dim = _config_int(transformer, "pooled_projection_dim")
        if encoder_hidden_states.ndim != 3 or encoder_hidden_states.shape[-1] != joint_dim:
            raise ValueError(
                f"SD3Velocity.encoder_hidden_states: expected [num_classes, seq, {joint_dim}], got "
                f"{tuple(encoder_hidden_states.shape)}"
            )
        num_classes = encoder_hidden_states.shape[0]
        if tuple(pooled_projections.shape) != (num_classes, pooled_dim):
            raise ValueError(
                f"SD3Velocity.pooled_projections: expected {(num_classes, pooled_dim)}, got "
                f"{tuple(pooled_projections.shape)}"
            )
        if num_train_timesteps < 1:
            raise ValueError(f"SD3Velocity.num_train_timesteps: expected >= 1, got {num_train_timesteps}")
        self.transformer = transformer
        self.in_channels = _config_int(transformer, "in_channels")
        self.num_train_timesteps = num_train_timesteps
        self.register_buffer("encoder_hidden_states", encoder_hidden_states.detach().float().clone())
        self.register_buffer("pooled_projections", pooled_projections.detach().float().clone())

    @classmethod
    def with_random_prompts(
        cls, transformer: nn.Module, num_classes: int, seq_len: int = 4, seed: int = 0, num_train_timesteps: int = 1000
    ) -> SD3Velocity:
        """The adapter with `random_prompt_embeddings` sized from the transformer's config."""
        hidden, pooled = random_prompt_embeddings(
            num_classes,
            seq_len,
            _config_int(transformer, "joint_attention_dim"),
            _config_int(transformer, "pooled_projection_dim"),
            seed,
        )
        return cls(transformer, hidden, pooled, num_train_timesteps)

    @property
    def num_classes(self) -> int:
        return int(self.encoder_hidden_states.shape[0])

    def conditioning(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`labels` `[b]` -> (`encoder_hidden_states` `[b, seq, joint_dim]`, `pooled_projections` `[b, pooled_dim]`),
        float32 on the buffers' device."""
        if labels.ndim != 1 or labels.is_floating_point():
            raise ValueError(
                f"SD3Velocity: expected integer labels of shape [b], got {labels.dtype} {tuple(labels.shape)}"
            )
        index = labels.to(self.encoder_hidden_states.device, torch.long)
        if index.numel() and not 0 <= int(index.min()) <= int(index.max()) < self.num_classes:
            raise ValueError(
                f"SD3Velocity: expected labels in [0, {self.num_classes}), got [{int(index.min())}, {int(index.max())}]"
            )
        return self.encoder_hidden_states[index], self.pooled_projections[index]

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        if x.ndim != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"SD3Velocity: expected x of shape [b, {self.in_channels}, h, w], got {tuple(x.shape)}")
        if sigma.shape != (b,) or labels.shape != (b,):
            raise ValueError(
                f"SD3Velocity: expected sigma and labels of shape ({b},), got {tuple(sigma.shape)} "
                f"and {tuple(labels.shape)}"
            )
        hidden, pooled = self.conditioning(labels)
        dtype = _model_dtype(self.transformer)
        timestep = sigma.to(x.device, torch.float32) * self.num_train_timesteps
        out = self.transformer(
            hidden_states=x.to(dtype),
            timestep=timestep,
            encoder_hidden_states=hidden.to(x.device, dtype),
            pooled_projections=pooled.to(x.device, dtype),
            return_dict=False,
        )[0]
        return out.float()
