"""TeacherPool: the distillation teacher's replicas, Ray actors in a placement group of their own (never in the
trainer's or a rollouter's bundle), each serving `score` (one prefill per batch: `native_engine.TeacherScorer`).

A rollouter scores each group as soon as it has generated it, on replica `group index % replicas`, so scoring runs
while other groups still generate. A replica whose process dies is restarted by Ray (`teacher.max_restarts`) and the
calls it had pending are run again on the new incarnation (`max_task_retries=-1`): a group waits for its scores,
it is never handed to the trainer without them. `fault/teacher_restarts` counts the restarts.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
from recipes.teacher import TeacherConfig
from rollout_core.teacher_scores import TeacherScores


@dataclass(frozen=True)
class TeacherStats:
    """Since the replica's current incarnation started: scoring calls, tokens scored, busy seconds."""

    calls: int
    tokens: int
    busy_s: float
    restarted: bool


class TeacherActor:
    """One replica. `crash_after_calls` > 0 injects a fault: the first incarnation exits (os._exit) when that many
    calls have arrived, before answering the last one (which Ray then runs again on the restarted replica)."""

    def __init__(self, checkpoint_dir: str, cfg: TeacherConfig, torch_threads: int, crash_after_calls: int = 0) -> None:
        import torch
        from native_engine.scoring import TeacherScorer

        torch.set_num_threads(torch_threads)
        self.scorer = TeacherScorer.load(checkpoint_dir, temperature=cfg.temperature, top_k=cfg.top_k,
                                         batch_tokens=cfg.batch_tokens)  # fmt: skip
        self.restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        self.crash_after_calls = 0 if self.restarted else crash_after_calls
        self.calls, self.tokens, self.busy_s = 0, 0, 0.0

    def score(self, sequences: list[tuple[list[int], list[int]]]) -> list[TeacherScores]:
        """`(prompt_ids, response_ids)` pairs -> one TeacherScores each, in order."""
        from native_engine.scoring import ScoreRequest

        self.calls += 1
        if self.crash_after_calls and self.calls >= self.crash_after_calls:
            os._exit(19)  # injected fault: the process dies as on an OOM kill, with this call pending
        t0 = time.perf_counter()
        requests = [ScoreRequest(p, r) for p, r in sequences]
        out = self.scorer.score(requests)
        self.busy_s += time.perf_counter() - t0
        self.tokens += sum(r.num_tokens for r in requests)
        return out

    def stats(self) -> TeacherStats:
        return TeacherStats(self.calls, self.tokens, self.busy_s, self.restarted)


class TeacherPool:
    def __init__(self, group: PlacementGroup, handles: list[Any]) -> None:
        self.group, self.handles = group, handles

    @classmethod
    def start(cls, cfg: TeacherConfig, checkpoint_dir: str, *, timeout_s: float,
              crash_after_calls: int = 0) -> TeacherPool:  # fmt: skip
        """Reserves `replicas` bundles of `cpus` CPUs, then starts one replica in each; raises RuntimeError naming
        what is missing when the cluster cannot hold the pool within `timeout_s`."""
        bundles = [{"CPU": cfg.cpus} for _ in range(cfg.replicas)]
        group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(group.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise RuntimeError(
                f"teacher: Ray could not reserve the teacher pool {bundles} (teacher.replicas {cfg.replicas} x "
                f"teacher.cpus {cfg.cpus}) within {timeout_s:.0f} s; the cluster has {ray.cluster_resources()}, "
                f"available {ray.available_resources()}. Lower teacher.replicas / teacher.cpus or add nodes"
            ) from None
        handles = []
        for i in range(cfg.replicas):
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
            options = {"num_cpus": cfg.cpus, "scheduling_strategy": strategy, "max_restarts": cfg.max_restarts,
                       "max_task_retries": -1}  # fmt: skip
            handles.append(ray.remote(TeacherActor).options(**options).remote(
                checkpoint_dir, cfg, cfg.torch_threads, crash_after_calls if i == 0 else 0))  # fmt: skip
        return cls(group, handles)

    async def metrics(self) -> dict[str, float]:
        """The pool's totals: busy seconds, tokens per busy second, calls, restarts (incarnations beyond the first)."""
        stats: list[TeacherStats] = [await h.stats.remote() for h in self.handles]
        busy, tokens = sum(s.busy_s for s in stats), sum(s.tokens for s in stats)
        return {
            "teacher/busy_s": busy, "teacher/tokens_per_s": tokens / busy if busy > 0 else 0.0,
            "teacher/calls": float(sum(s.calls for s in stats)),
            "fault/teacher_restarts": float(sum(s.restarted for s in stats)),
        }  # fmt: skip

    def close(self) -> None:
        for h in self.handles:
            ray.kill(h, no_restart=True)
        remove_placement_group(self.group)
