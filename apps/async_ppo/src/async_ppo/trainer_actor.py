"""TrainerActor: the training backend behind a Ray actor: one PPO update per batch of finished groups.

It never waits for rollouts itself: the driver hands it a step's groups (an object reference Ray resolves in
this process, so samples travel broker -> trainer without passing through the driver's memory twice).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from moe_models import load_pretrained
from sync_ppo.components import backend_config
from sync_ppo.config import AlgorithmConfig, TrainConfig
from sync_ppo.step_batch import build_step_batch
from trainers.backend import BackendState, TorchBackend

from async_ppo.behaviour_probe import BehaviourProbe
from async_ppo.group import FinishedGroup
from async_ppo.staleness import staleness_metrics


@dataclass(frozen=True)
class TrainerSpec:
    checkpoint_dir: str  # the base model (HF format)
    train: TrainConfig
    algorithm: AlgorithmConfig
    temperature: float
    seed: int
    torch_threads: int
    pad_token_id: int
    keep_versions: int  # weight versions the behaviour probe remembers (max_staleness + 1)


@dataclass(frozen=True)
class TrainOutcome:
    """`metrics` of the update; `advantages` per response uid (real samples only); `version` after it."""

    metrics: dict[str, float]
    advantages: dict[str, float]
    version: int


class TrainerActor:
    def __init__(self, spec: TrainerSpec, resume_from: str | None = None) -> None:
        torch.set_num_threads(spec.torch_threads)
        torch.manual_seed(spec.seed)
        self.spec = spec
        cfg = backend_config(spec.train, spec.algorithm, temperature=spec.temperature, seed=spec.seed)
        model = load_pretrained(spec.checkpoint_dir)
        self.backend = TorchBackend(model, cfg, router_replay=spec.algorithm.router_replay)
        if resume_from is not None:
            self.backend.load_state_dict(BackendState.load(resume_from))
        self.probe = BehaviourProbe(model, keep=spec.keep_versions, sample_seqs=spec.train.mismatch_sample_seqs,
                                    temperature=spec.temperature, seed=spec.seed)  # fmt: skip
        self.probe.record(model, self.backend.version)
        self._probe_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="behaviour-probe")

    @property
    def version(self) -> int:
        return self.backend.version

    def get_version(self) -> int:
        return self.backend.version

    def train(self, taken: tuple[list[FinishedGroup], list[int]]) -> TrainOutcome:
        """One PPO update on every ok response of `groups` (all other statuses are counted, never trained)."""
        groups, _ = taken
        t0 = time.perf_counter()
        scored = [s for g in groups for s in g.samples]
        sb = build_step_batch(scored, multiple=self.spec.train.mini_batches_per_step,
                              pad_token_id=self.spec.pad_token_id, advantage=self.spec.algorithm.advantage)  # fmt: skip
        policy_version = self.backend.version
        t1 = time.perf_counter()
        old = None
        if self.spec.algorithm.old_log_probs == "recompute":
            old = self.backend.log_probs(sb.batch, replay=self.spec.algorithm.router_replay)
        # the probe reads only remembered weights and the batch: it runs on a second core during the update
        probe = self._probe_thread.submit(self.probe.measure, sb.batch, policy_version)
        metrics = self.backend.train_step(sb.batch, sb.advantages, old)
        t2 = time.perf_counter()
        metrics |= probe.result()
        self.probe.record(self.backend.model, self.backend.version)
        metrics |= staleness_metrics([s.trajectory for s in sb.real], policy_version)
        t3 = time.perf_counter()
        metrics |= {"timing/collate_s": t1 - t0, "timing/update_s": t2 - t1, "timing/probe_wait_s": t3 - t2}
        metrics["timing/train_s"] = time.perf_counter() - t0
        advantages = {
            s.uid: float(a) for s, a in zip(sb.samples, sb.advantages.tolist(), strict=True) if not s.is_padding
        }
        return TrainOutcome(metrics, advantages, self.backend.version)

    def export_weights(self) -> dict[str, np.ndarray]:
        state, _ = self.backend.export_weights()
        return state

    def save(self, directory: str) -> str:
        self.backend.state_dict().save(Path(directory))
        return directory
