"""The Algorithm seam: what `trainers.step` needs from a training algorithm (PPO, GSPO, decoupled PPO, ...).

An algorithm is a few pure functions of tensors; it never touches a model, an optimiser or a device. The step
(`trainers.step`) owns epochs, mini-batches, micro-batches and metrics, once, for every algorithm and every
training backend.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from trainers.algorithm.correction import CorrectionConfig
from trainers.algorithm.loss_io import LossInputs, LossOutputs
from trainers.batch import TrainBatch
from trainers.estimators import Advantages


@runtime_checkable
class Algorithm(Protocol):
    """- `recompute_old_log_probs`: the step scores the batch under the weights before the update (no grad) and
      passes them as `old_log_probs` (else the rollout's log-probs are the old policy: bypass mode).
    - `needs_reference`: the step scores the batch under the reference policy and passes `ref_log_probs`.
    - `uses_teacher`: the batch carries a teacher's log-probs (`TrainBatch.teacher_log_probs`, scored at rollout
      time), which the step passes as `ref_log_probs` instead (never together with `needs_reference`).
    - `correction`: rollout correction applied once per step to the whole batch before the update (None: off).
    - `advantages(batch, old, ref)`: the batch's advantages (`trainers.estimators.Advantages`), computed on the
      CPU batch.
    - `loss(inputs)`: one micro-batch's loss and metrics.
    """

    name: str
    recompute_old_log_probs: bool
    needs_reference: bool
    uses_teacher: bool
    correction: CorrectionConfig | None

    def advantages(
        self, batch: TrainBatch, old_log_probs: torch.Tensor | None, ref_log_probs: torch.Tensor | None
    ) -> Advantages: ...

    def loss(self, inputs: LossInputs) -> LossOutputs: ...
