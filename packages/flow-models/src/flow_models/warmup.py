"""Supervised flow-matching warm-up: turns a random velocity model into the FlowGRPO base.

Loss: `|| v_theta(x_sigma, sigma, y) - (noise - x0) ||^2` with `x_sigma = (1 - sigma) x0 + sigma noise` and sigma
drawn from a logit-normal (mean 0, std 1), the common choice for rectified flows.

The base must leave room for RL: digits are so easy that a few hundred steps already draw the requested class
almost every time. So the warm-up replaces a fraction `label_noise` of the labels by uniformly random ones: the base
draws good digits that follow their label loosely (well below the classifier's ceiling under the validation
sampler), a model that follows its prompt loosely, which is what RL on a prompt-following reward is for.
"""

from __future__ import annotations

import torch

from flow_models.digits import NUM_CLASSES, DigitSplits
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from flow_models.warmup_config import FlowWarmupConfig


def flow_matching_loss(
    model: VelocityMLP, x0: torch.Tensor, labels: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """The mean squared velocity error of one batch (0-dim)."""
    sigma = torch.sigmoid(torch.randn(x0.shape[0], generator=generator))
    noise = torch.randn(x0.shape, generator=generator)
    s = sigma.view(-1, *([1] * (x0.dim() - 1)))
    x_sigma = (1 - s) * x0 + s * noise
    return torch.mean((model(x_sigma, sigma, labels) - (noise - x0)) ** 2)


def warm_up(model_cfg: VelocityConfig, cfg: FlowWarmupConfig, data: DigitSplits) -> tuple[VelocityMLP, float]:
    """The trained base and its last-step loss."""
    torch.manual_seed(cfg.seed)
    model = VelocityMLP(model_cfg)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    loss = torch.zeros(())
    x, y = data.train.images, data.train.labels
    for _ in range(cfg.steps):
        idx = torch.randint(0, len(y), (cfg.batch_size,), generator=gen)
        noisy = torch.rand(cfg.batch_size, generator=gen) < cfg.label_noise
        labels = torch.where(noisy, torch.randint(0, NUM_CLASSES, (cfg.batch_size,), generator=gen), y[idx])
        loss = flow_matching_loss(model, x[idx], labels, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval(), float(loss.detach())
