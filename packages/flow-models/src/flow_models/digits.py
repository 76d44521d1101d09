"""The offline image data: scikit-learn's 8x8 handwritten digits (1,797 images shipped inside scikit-learn, no
download), as float32 `[n, 1, 8, 8]` in [-1, 1] with int64 labels 0..9, split deterministically."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NUM_CLASSES = 10
IMAGE_SIZE = 8


@dataclass(frozen=True)
class ImageSet:
    images: torch.Tensor  # [n, 1, 8, 8] float32 in [-1, 1]
    labels: torch.Tensor  # [n] int64

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class DigitSplits:
    train: ImageSet
    val: ImageSet


def to_unit(images: torch.Tensor) -> torch.Tensor:
    """[-1, 1] model space -> [0, 1] pixel intensity (clamped), for rewards and pictures."""
    return ((images + 1) / 2).clamp(0, 1)


def load_digit_splits(val_fraction: float = 0.2, seed: int = 0) -> DigitSplits:
    """A seeded permutation; the first `val_fraction` of it is the validation split."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"load_digit_splits: expected 0 < val_fraction < 1, got {val_fraction}")
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.from_numpy((data.images.astype(np.float32) / 8.0) - 1.0).unsqueeze(1)
    labels = torch.from_numpy(data.target.astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(labels)))
    n_val = round(val_fraction * len(labels))
    val, train = order[:n_val], order[n_val:]
    return DigitSplits(ImageSet(images[train], labels[train]), ImageSet(images[val], labels[val]))
