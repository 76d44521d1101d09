"""The TrainingBackend seam: compute only. It holds the policy's weights, optimiser and device; it never decides
what a step does (that is `trainers.step`, the same for every backend and every algorithm).

A backend for another engine (FSDP2 here; VeOmni or Megatron-Core elsewhere) implements these calls and runs the
same algorithms unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

import torch

from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.data_parallel import DataParallel
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch

PolicyRole = Literal["policy", "reference"]
# (the micro-batch's current log-probs [b, t-1], those of the teacher's top-k ids [b, t-1, K] or None) -> loss
LossFn = Callable[[torch.Tensor, torch.Tensor | None], LossOutputs]


@runtime_checkable
class TrainingBackend(Protocol):
    """- `device`: where it computes; it moves each micro-batch there (`TrainBatch.to`) and returns tensors there.
    - `data_parallel`: this process's rank and world when the weights are sharded over several processes (every
      rank gets the same batch and runs the same number of forwards), else None.
    - `log_probs(micro_batches, replay=..., role=...)`: per micro-batch, `[b, t-1]` float32 log-probs of each next
      token under the sampling temperature, no gradient; `replay` replays each sample's recorded routing (rows
      without a record route natively); `role="reference"` scores with the frozen reference weights (only when
      the backend was built with them).
    - `forward_backward(micro, loss_fn, replay=...)`: forward with gradient, `loss_fn(log_probs, top_k)`, backward
      of its loss (scaled as the sharding needs); returns the loss function's outputs, detached. `top_k` `[b, t-1,
      K]` are the log-probs of `micro.teacher_top_ids` from the same forward when the batch has them, else None.
    - `zero_grad()`: drops the gradients (the step calls it before each mini-batch's first backward).
    - `optimizer_step()`: clips the global grad norm and steps; returns the norm (0-dim, before clipping). The
      gradients stay until the next `zero_grad` (tests read them).
    - `advance_version()`: one update is complete; the weights are `version + 1` from now on.
    - `learning_rate`: the optimiser's current learning rate.
    - `shares_prompts`: whether a forward computes a prompt that several rows of a micro-batch share once (the step
      then keeps a group's rows together and sizes micro-batches by the tokens computed).
    - `export_weights()`: the full weights by Hugging Face name, in their own dtype, on the CPU, and their version.
    - `state_dict()` / `load_state_dict(state)`: everything a checkpoint needs to continue bit for bit (weights,
      optimiser moments and step counts, torch RNG, version).
    """

    @property
    def version(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def data_parallel(self) -> DataParallel | None: ...

    @property
    def learning_rate(self) -> float: ...

    @property
    def shares_prompts(self) -> bool: ...

    def log_probs(
        self, micro_batches: Sequence[TrainBatch], *, replay: bool, role: PolicyRole = "policy"
    ) -> list[torch.Tensor]: ...

    def forward_backward(self, micro: TrainBatch, loss_fn: LossFn, *, replay: bool) -> LossOutputs: ...

    def optimizer_step(self) -> torch.Tensor: ...

    def zero_grad(self) -> None: ...

    def advance_version(self) -> None: ...

    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]: ...

    def state_dict(self) -> BackendState: ...

    def load_state_dict(self, state: BackendState) -> None: ...
