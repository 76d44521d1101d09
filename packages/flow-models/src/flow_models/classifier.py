"""The reward model: a small digit classifier trained on the same data; a sample's reward is the probability it
gives to the requested class. Trained once per config and cached (`ensure_classifier`)."""

from __future__ import annotations

import torch
from torch import nn

from flow_models.digits import NUM_CLASSES, DigitSplits
from flow_models.reward_config import ClassifierConfig


class DigitClassifier(nn.Module):
    """`[b, 1, 8, 8]` in [-1, 1] -> `[b, 10]` logits."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64, hidden),
            nn.SiLU(),
            nn.Dropout(0.1),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, NUM_CLASSES),
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images.float())

    @torch.no_grad()
    def class_probability(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """`[b]` float32: p(labels | image)."""
        was_training = self.training
        self.eval()
        probs = torch.softmax(self(images.clamp(-1, 1)), dim=1)
        self.train(was_training)
        return probs.gather(1, labels[:, None]).squeeze(1)


def train_classifier(cfg: ClassifierConfig, data: DigitSplits) -> tuple[DigitClassifier, float]:
    """The classifier and its validation accuracy (fraction in [0, 1])."""
    gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = DigitClassifier(cfg.hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    x, y = data.train.images, data.train.labels
    for _ in range(cfg.steps):
        idx = torch.randint(0, len(y), (cfg.batch_size,), generator=gen)
        noisy = x[idx] + cfg.noise_std * torch.randn(x[idx].shape, generator=gen)
        loss = nn.functional.cross_entropy(model(noisy), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(data.val.images).argmax(1) == data.val.labels).float().mean())
    return model, acc
