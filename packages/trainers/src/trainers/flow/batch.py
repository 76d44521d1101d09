"""RolloutBatch: one step's images with everything the trainer needs, as numpy arrays (what crosses Ray's object
store zero-copy), plus the weight version that sampled them. Saved into checkpoints while still untrained."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from flow_models.sampler import FlowRollout


def _tensor(a: np.ndarray) -> torch.Tensor:
    """A view of `a`, or of a copy when it is read-only (arrays from Ray's object store are)."""
    return torch.from_numpy(a if a.flags.writeable else a.copy())


@dataclass(frozen=True)
class RolloutBatch:
    """`N = prompts_per_step x samples_per_prompt` images; the samples of group g are the rows with `groups == g`.
    `window_start`: the first trained step (the window is `window_size` consecutive steps)."""

    step: int
    version: int  # the weights that sampled every image of the batch
    window_start: int
    labels: np.ndarray  # [N] int64 requested class
    groups: np.ndarray  # [N] int64
    sigmas: np.ndarray  # [num_steps + 1] float32
    latents: np.ndarray  # [N, W + 1, 1, 8, 8] float32: the window's states
    log_probs: np.ndarray  # [N, W] float32: the sampler's log-probs (the old policy)
    images: np.ndarray  # [N, 1, 8, 8] float32 in model space ([-1, 1] for data)
    rewards: np.ndarray  # [N] float32
    sample_s: float  # seconds the rollouter spent sampling and scoring

    def rollout(self) -> FlowRollout:
        window = tuple(range(self.window_start, self.window_start + self.log_probs.shape[1]))
        return FlowRollout(
            _tensor(self.labels),
            _tensor(self.sigmas),
            window,
            _tensor(self.latents),
            _tensor(self.log_probs),
            _tensor(self.images),
        )

    @classmethod
    def of(
        cls, step: int, version: int, rollout: FlowRollout, groups: np.ndarray, rewards: torch.Tensor, sample_s: float
    ) -> RolloutBatch:
        start = rollout.window[0] if rollout.window else 0
        return cls(
            step,
            version,
            start,
            rollout.labels.numpy(),
            groups,
            rollout.sigmas.numpy(),
            rollout.latents.numpy(),
            rollout.log_probs.numpy(),
            rollout.images.numpy(),
            rewards.float().numpy(),
            sample_s,
        )

    def metrics(self, lag: int) -> dict[str, float]:
        """The batch's metrics line: its rewards, the version `lag` it was trained at, its window and size."""
        r = self.rewards
        return {
            "reward/mean": float(r.mean()),
            "reward/std": float(r.std()),
            "reward/max": float(r.max()),
            "rollout/version_lag": float(lag),
            "rollout/window_start": float(self.window_start),
            "rollout/images": float(len(r)),
        }

    def save(self, path: Path) -> None:
        np.savez(path, **{f.name: np.asarray(getattr(self, f.name)) for f in fields(self)})

    @classmethod
    def load(cls, path: Path) -> RolloutBatch:
        with np.load(path) as data:
            values = {f.name: data[f.name] for f in fields(cls)}
        scalars = {"step": int, "version": int, "window_start": int, "sample_s": float}
        return cls(**{k: scalars[k](v) if k in scalars else v for k, v in values.items()})  # type: ignore[arg-type]
