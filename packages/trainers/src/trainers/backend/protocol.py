"""The TrainingBackend seam: what a trainer loop needs from whatever holds the policy's weights and optimiser."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch

from trainers.backend.state import BackendState
from trainers.batch import TrainBatch


@runtime_checkable
class TrainingBackend(Protocol):
    """A policy being optimised (plain torch here; FSDP2, Megatron or VeOmni behind the same calls).

    - `log_probs(batch, replay=...)`: `[B, T-1]` float32 log-probs of each next token under the current weights
      and the sampling temperature (entry `t` scores `input_ids[:, t+1]`), no gradient; `replay=True` replays
      each sample's recorded routing (rows without a record route natively).
    - `train_step(batch, advantages, old_log_probs)`: one PPO update on the batch; `advantages` is `[B]`
      (broadcast to loss tokens) or `[B, T-1]`; `old_log_probs` None means bypass mode (old = the rollout's
      log-probs). Returns flat float metrics, including the train-vs-rollout mismatch with and without replay.
      Increments `version` by one.
    - `export_weights()`: the full state dict as numpy arrays (HF parameter names) and the version it is.
    - `state_dict()` / `load_state_dict(state)`: everything a checkpoint needs to continue bit-for-bit
      (weights, optimiser moments and step counts, torch RNG, version).
    """

    @property
    def version(self) -> int: ...

    def log_probs(self, batch: TrainBatch, *, replay: bool) -> torch.Tensor: ...

    def train_step(
        self, batch: TrainBatch, advantages: torch.Tensor, old_log_probs: torch.Tensor | None = None
    ) -> dict[str, float]: ...

    def export_weights(self) -> tuple[dict[str, np.ndarray], int]: ...

    def state_dict(self) -> BackendState: ...

    def load_state_dict(self, state: BackendState) -> None: ...
