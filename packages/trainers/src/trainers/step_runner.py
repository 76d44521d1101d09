"""StepRunner: where `train_step` runs. The apps hand it a step's batch and get the step's result; whether the
backend lives in this process (`LocalSteps`) or in rank processes of its own (`trainers.rank_group.RankGroup`,
every rank running the same `train_step` on the same batch: VeOmni, Megatron-Core) follows from the backend config
(`build_steps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from trainers.algorithm.build import build_algorithm
from trainers.backend.config import (
    BackendConfig,
    MegatronBackendConfig,
    TorchBackendConfig,
    VeOmniBackendConfig,
)
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch
from trainers.step import StepResult, train_step
from trainers.step_spec import StepSpec
from trainers.train_config import TrainLoopConfig

if TYPE_CHECKING:
    from moe_models import MoEForCausalLM

    from trainers.algorithm import Algorithm
    from trainers.backend.protocol import TrainingBackend


class StepRunner(Protocol):
    """- `version`: updates applied; `world_size`: ranks a step's batch is split over (its rows must be a multiple
      of `trainers.required_multiple(world_size, ...)`).
    - `train_step(batch)`: one update of the algorithm on `batch` (`trainers.train_step` on every rank).
    - `export_weights()`: full weights by Hugging Face name (in-memory layout), CPU, own dtype, and their version.
    - `policy_model()`: an `MoEForCausalLM` holding the current weights, for probes that score with our model.
    - `state_dict()` / `load_state_dict()`: a checkpoint that continues bit for bit.
    - `close()`: frees what it holds (rank processes end)."""

    @property
    def version(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    def train_step(self, batch: TrainBatch) -> StepResult: ...

    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]: ...

    def policy_model(self) -> MoEForCausalLM: ...

    def state_dict(self) -> BackendState: ...

    def load_state_dict(self, state: BackendState) -> None: ...

    def close(self) -> None: ...


def build_steps(cfg: BackendConfig, spec: StepSpec) -> StepRunner:
    """`backend.kind torch`: the backend in this process; `veomni`, `megatron`: `cfg.ranks` processes, each holding
    its part of the policy and running the same `train_step`."""
    if isinstance(cfg, TorchBackendConfig):
        return LocalSteps.build(cfg, spec)
    if isinstance(cfg, VeOmniBackendConfig | MegatronBackendConfig):
        from trainers.rank_group import RankGroup

        return RankGroup.start(cfg, spec)
    raise ValueError(f"build_steps: expected a torch, veomni or megatron backend config, got {type(cfg).__name__}")


class LocalSteps:
    """A `TrainingBackend` in this process and the algorithm it trains."""

    def __init__(self, backend: TrainingBackend, algorithm: Algorithm, loop: TrainLoopConfig, seed: int) -> None:
        self.backend, self.algorithm, self.loop, self.seed = backend, algorithm, loop, seed

    @classmethod
    def build(cls, cfg: TorchBackendConfig, spec: StepSpec) -> LocalSteps:
        """The policy (and, for a KL term, a frozen reference) from `spec.checkpoint_dir`."""
        from moe_models import load_pretrained

        torch.manual_seed(spec.seed)
        algorithm = build_algorithm(spec.algorithm, max_new_tokens=spec.max_new_tokens)
        vocab = spec.vocab_size
        reference = load_pretrained(spec.checkpoint_dir, vocab_size=vocab) if algorithm.needs_reference else None
        backend = cfg.build(
            load_pretrained(spec.checkpoint_dir, vocab_size=vocab),
            spec.optim,
            temperature=spec.temperature,
            reference=reference,
            total_steps=spec.total_steps,
            true_on_policy=spec.true_on_policy,
        )
        return cls(backend, algorithm, spec.loop, spec.seed)

    @property
    def version(self) -> int:
        return self.backend.version

    @property
    def world_size(self) -> int:
        dp = self.backend.data_parallel
        return 1 if dp is None else dp.world_size

    def train_step(self, batch: TrainBatch) -> StepResult:
        return train_step(self.backend, self.algorithm, batch, self.loop, seed=self.seed)

    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        return self.backend.export_weights()

    def policy_model(self) -> MoEForCausalLM:
        """The live model being trained (not a copy)."""
        return self.backend.model  # type: ignore[attr-defined]

    def state_dict(self) -> BackendState:
        return self.backend.state_dict()

    def load_state_dict(self, state: BackendState) -> None:
        self.backend.load_state_dict(state)

    def close(self) -> None:
        """Nothing to free: the backend is garbage like any object."""
