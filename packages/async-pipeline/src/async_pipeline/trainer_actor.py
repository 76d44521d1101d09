"""TrainerActor: the policy trainer behind a Ray actor: one update per batch of finished groups.

It never waits for rollouts itself: the driver hands it a step's take from the broker (an object reference Ray
resolves in this process), so samples travel broker -> trainer and never through the driver. The rollout dump and
the per-sample metrics are written and computed here; the driver receives metrics only. Weights leave through
the Ray object store (`RayWeightSync`), in buckets, in their own dtype.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from run_lifecycle import RunDir
from trainers import StaleBound
from trainers.backend import BackendState
from trainers.recipe.config import RecipeConfig
from trainers.recipe.export import write_policy
from trainers.recipe.policy_trainer import PolicyTrainer
from trainers.recipe.setup import run_tokenizer
from trainers.staleness import oldest_trainable, staleness_metrics
from trainers.weight_sync import WeightHandle

from async_pipeline.behaviour_probe import BehaviourProbe
from async_pipeline.group import ExcludedGroup, FinishedGroup
from async_pipeline.lengths import length_metrics, write_excluded
from async_pipeline.ray_session.node import NodeAware
from async_pipeline.ray_session.weight_sync import RayWeightSync


@dataclass(frozen=True)
class TrainerSpec:
    cfg: RecipeConfig
    checkpoint_dir: str  # the base model (HF format)
    run_dir: str
    pad_token_id: int
    max_new_tokens: int
    vocab_size: int | None  # the tokenizer's ids: the only ones scored
    keep_versions: int  # weight versions the behaviour probe remembers (max_staleness + 1)
    bucket_bytes: int
    max_staleness: int = 1
    stale_is_cap: float | None = None  # staleness_policy correct: tokens beyond the bound are corrected (None: rerun)


@dataclass(frozen=True)
class TrainOutcome:
    """`metrics` of the update (the step's rollout dump is written); `version` after it."""

    metrics: dict[str, float]
    version: int


class TrainerActor(NodeAware):
    def __init__(self, spec: TrainerSpec, resume_from: str | None = None) -> None:
        cfg = spec.cfg
        torch.set_num_threads(cfg.run.trainer_threads(alone=False))  # rollouts run alongside
        self.spec = spec
        run = self.run = RunDir(Path(spec.run_dir))
        self.trainer = PolicyTrainer.build(
            cfg,
            spec.checkpoint_dir,
            pad_token_id=spec.pad_token_id,
            vocab_size=spec.vocab_size,
            max_new_tokens=spec.max_new_tokens,
            run=run,
        )
        if resume_from is not None:
            self.trainer.steps.load_state_dict(BackendState.load(resume_from))
        model = self.trainer.steps.policy_model()
        self.probe = BehaviourProbe(
            model,
            keep=spec.keep_versions,
            sample_seqs=cfg.train.mismatch_sample_seqs,
            temperature=cfg.rollout.temperature,
            seed=cfg.run.seed,
        )
        self.probe.record(model, self.trainer.version)
        self._probe_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="behaviour-probe")
        self.sync = RayWeightSync(spec.bucket_bytes)

    def get_version(self) -> int:
        return self.trainer.version

    def train(self, step: int, taken: tuple[list[FinishedGroup], list[FinishedGroup]]) -> TrainOutcome:
        """One update on every ok response of the groups `Broker.take` returned (all other statuses are counted,
        never trained); the groups it excluded as too stale are recorded by their lengths only. With
        `stale_is_cap`, the batch carries the staleness bound: its tokens beyond it are trained corrected."""
        groups, stale = taken
        excluded = [ExcludedGroup.of(g) for g in stale]
        t0 = time.perf_counter()
        scored = [s for g in groups for s in g.samples]
        sb = self.trainer.prepare(scored)
        policy_version = self.trainer.version
        if self.spec.stale_is_cap is not None:
            bound = StaleBound(oldest_trainable(policy_version, self.spec.max_staleness), self.spec.stale_is_cap)
            sb = dataclasses.replace(sb, batch=dataclasses.replace(sb.batch, stale_bound=bound))
        write_excluded(self.run, step, excluded)
        t1 = time.perf_counter()
        # the probe reads only remembered weights and the batch: it runs on a second core during the update
        probe = self._probe_thread.submit(self.probe.measure, sb.batch, policy_version)
        metrics = self.trainer.update(step, sb, scored)
        t2 = time.perf_counter()
        metrics |= probe.result()
        self.probe.record(self.trainer.steps.policy_model(), self.trainer.version)
        metrics |= staleness_metrics([s.trajectory for s in sb.real], policy_version)
        metrics |= length_metrics(groups, excluded)
        metrics |= {
            "staleness/excluded_groups": float(len(excluded)),
            "rollout/generated_tokens": float(sum(g.generated_tokens for g in groups)),
            "rollout/group_generate_s_mean": sum(g.generate_s for g in groups) / len(groups),
        }
        t3 = time.perf_counter()
        metrics |= {"timing/collate_s": t1 - t0, "timing/update_s": t2 - t1, "timing/probe_wait_s": t3 - t2}
        metrics["timing/train_s"] = time.perf_counter() - t0
        return TrainOutcome(metrics, self.trainer.version)

    def publish(self) -> WeightHandle:
        """The current weights in Ray's object store (owned by this actor), as a handle for the engines."""
        return self.trainer.publish(self.sync)

    def save(self, directory: str, policy_dir: str | None = None) -> str:
        """The backend state into `directory`; with `policy_dir`, the policy as a Hugging Face folder too."""
        steps = self.trainer.steps
        steps.state_dict().save(directory)
        if policy_dir is not None:
            tokenizer = run_tokenizer(self.spec.cfg.model, self.spec.checkpoint_dir)
            write_policy(Path(policy_dir), steps.export_weights()[0], self.spec.checkpoint_dir, tokenizer)
        return directory
