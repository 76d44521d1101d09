"""FlowBackend: a velocity model and its AdamW optimiser (an `OptimisedModule`), with the two calls a FlowGRPO
step needs from its model. Compute only, like `trainers.backend.TorchBackend`: what a step does is
`trainers.flow.step`'s.
"""

from __future__ import annotations

import copy

import torch
from flow_models.sampler import FlowRollout, SamplerConfig, window_log_prob

from trainers.algorithm.loss_io import LossOutputs
from trainers.backend.config import OptimConfig
from trainers.backend.optimised_module import OptimisedModule
from trainers.flow.loss import FlowLossInputs


class FlowBackend(OptimisedModule):
    """`reference`: a frozen copy of the base weights (for a KL term), never trained; None without one."""

    def __init__(
        self,
        model: torch.nn.Module,
        optim: OptimConfig | None,
        sampler: SamplerConfig,
        *,
        with_reference: bool = False,
        total_steps: int | None = None,
    ) -> None:
        super().__init__(model.train(), optim, total_steps=total_steps)
        self.sampler = sampler
        self.reference = copy.deepcopy(model).eval().requires_grad_(False) if with_reference else None
        self.build_optimizer()

    @torch.no_grad()
    def log_probs(self, rollout: FlowRollout) -> torch.Tensor:
        """`[b, W]` log-probs of the stored window outcomes under the current weights, no gradient."""
        columns = [window_log_prob(self.model, rollout, k, self.sampler)[0] for k in range(len(rollout.window))]
        return torch.stack(columns, dim=1) if columns else rollout.log_probs.new_zeros((len(rollout), 0))

    def forward_backward(
        self,
        micro: FlowRollout,
        k: int,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        num_samples: float,
        loss_fn: object,
        behaviour_weights: torch.Tensor | None = None,
    ) -> LossOutputs:
        """Window step `k` of `micro` with gradient: `loss_fn(FlowLossInputs) -> LossOutputs`, then backward."""
        log_probs, gaussian = window_log_prob(self.model, micro, k, self.sampler)
        ref_mean = None
        if self.reference is not None:
            with torch.no_grad():
                ref_mean = window_log_prob(self.reference, micro, k, self.sampler)[1].mean
        inputs = FlowLossInputs(
            log_probs,
            old_log_probs,
            advantages,
            gaussian.mean,
            gaussian.std,
            num_samples,
            len(micro.window),
            str(self.sampler.reduction),
            ref_mean,
            behaviour_weights,
        )
        out: LossOutputs = loss_fn(inputs)  # type: ignore[operator]
        out.loss.backward()
        return LossOutputs(out.loss.detach(), out.means, out.sums, out.maxima)

    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """Full weights on the CPU in their own dtype, and their version."""
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}, self.version
