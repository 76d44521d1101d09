"""Teacher scoring streamed with rollout: each finished group is scored while the others still generate, and every
ok sample of a step leaves with its teacher's scores (never without them).

- `build_teachers`: the run's teacher engines (`teacher.engine`: the native scorer on a thread of its own, or a vLLM
  server), one per teacher of its roster (`teacher.sources`), after the checks of `trainers.distillation.teacher`;
- `TeacherStream`: the `after_group` hook of `trainers.rollout.rollout.generate_all`; it scores the group's
trajectories (a
  multi-turn episode is one sequence: every turn, observations included, is scored in one prefill; observations
  stay out of the loss by their mask) and keeps the scores by request id;
- `attach_teacher`: the scored samples with their teacher scores; raises when an ok sample has none.

Validation never passes through here: it is not distilled.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rollout_core import Trajectory, TrajectoryStatus
from rollout_core.teacher_engine import TeacherEngine
from rollout_core.teacher_scores import TeacherScores

from trainers.distillation.teacher import TeacherConfig, TeacherRoster, check_roster, ensure_roster, teacher_site
from trainers.distillation.teacher_set import TeacherSet
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample

if TYPE_CHECKING:
    from moe_models import CharTokenizer, ChatTokenizer
    from rl_tasks.model_config import ModelConfig
    from rl_tasks.task import Task

    from trainers.warmup import WarmupConfig


class TeacherStream:
    """One step's scoring: pass `after_group` to `generate_all`, then read `scores` and `metrics()`."""

    def __init__(self, teacher: TeacherSet) -> None:
        self.teacher = teacher
        self.scores: dict[str, TeacherScores] = {}
        self._busy0, self._tokens0 = teacher.busy_s, teacher.tokens
        self._last_generated = 0.0
        self._last_scored = 0.0
        self.samples = dict.fromkeys(teacher.engines, 0)  # responses scored by each teacher, by roster key

    async def after_group(self, requests: Sequence[GenRequest], trajectories: Sequence[Trajectory]) -> None:
        self._last_generated = time.perf_counter()
        ok = [(r, t) for r, t in zip(requests, trajectories, strict=True) if t.status is TrajectoryStatus.OK]
        if ok:
            pairs = [(t.prompt_ids, t.response_ids) for _, t in ok]
            sources = [r.example.data_source for r, _ in ok]
            for source in sources:
                self.samples[self.teacher.roster.key_of(source)] += 1
            for (r, _), s in zip(ok, await self.teacher.score(pairs, sources), strict=True):
                self.scores[r.request_id] = s
        self._last_scored = time.perf_counter()

    def metrics(self) -> dict[str, float]:
        """`teacher/score_s`: the teacher's busy time this step; `teacher/tokens_per_s`: tokens it scored per busy
        second; `teacher/tail_s`: scoring left after the last group finished generating (what did not overlap);
        `teacher/samples/<teacher>`: responses each teacher scored (`default` and the named data sources)."""
        busy = self.teacher.busy_s - self._busy0
        tokens = self.teacher.tokens - self._tokens0
        return {
            "teacher/score_s": busy,
            "teacher/tokens_per_s": tokens / busy if busy > 0 else 0.0,
            "teacher/tail_s": max(0.0, self._last_scored - self._last_generated),
            **{f"teacher/samples/{TeacherRoster.label(k)}": float(n) for k, n in self.samples.items()},
        }


def attach_teacher(scored: Sequence[ScoredSample], scores: dict[str, TeacherScores]) -> list[ScoredSample]:
    """Every ok sample with its teacher's scores (others unchanged); raises ValueError naming the samples without."""
    missing = [s.uid for s in scored if s.status is SampleStatus.OK and s.uid not in scores]
    if missing:
        raise ValueError(
            f"attach_teacher: expected teacher scores for every ok sample, got none for {len(missing)} "
            f"({missing[:5]}): a sample is never trained without its teacher's scores"
        )
    return [dataclasses.replace(s, teacher=scores[s.uid]) if s.status is SampleStatus.OK else s for s in scored]


def teacher_metrics(scored: Sequence[ScoredSample]) -> dict[str, float]:
    """Over the loss tokens of the ok samples, when the teacher returned a top-k: `opd/outside_top_k`, the sampled
    tokens outside the teacher's top-k (counted: a top-k-only loss could not score them), and `teacher/top_k_mass`,
    the teacher's mean probability mass on its top-k."""
    rows = [(s.teacher, np.asarray(s.trajectory.loss_mask, dtype=bool)) for s in scored if s.teacher is not None]
    if not rows or rows[0][0].top_k == 0:
        return {}
    outside = sum(int((~t.in_top_k & m).sum()) for t, m in rows)
    mass = np.concatenate([t.top_k_mass[m] for t, m in rows])
    return {"opd/outside_top_k": float(outside), "teacher/top_k_mass": float(mass.mean()) if mass.size else 0.0}


async def build_teachers(
    cfg: TeacherConfig,
    *,
    task: Task,
    student_warmup: WarmupConfig,
    student_model: ModelConfig,
    warmup_cache: Path,
    tokenizer: ChatTokenizer | CharTokenizer,
    max_len: int,
    run_root: Path,
) -> TeacherSet:
    """The run's teachers in this process: the given checkpoint or the cached default one (built on first use under
    `warmup_cache`, as the student's base is) and the named ones, checked against the student's tokenizer and
    `max_len` (`trainers.distillation.teacher.check_teacher`) before their engines start; each engine's files go under
    `run_root/teacher/<label>`."""
    roster = ensure_roster(cfg, task, student_warmup, student_model, warmup_cache)
    check_roster(cfg, roster, tokenizer, max_len)
    engines: dict[str, TeacherEngine] = {}
    try:
        for key, where in roster.items():
            work_dir = str(run_root / "teacher" / roster.label(key))
            site = teacher_site(cfg, where, max_len, work_dir, vocab_size=tokenizer.vocab_size)
            engines[key] = await cfg.engine.build(site)
    except BaseException:
        for engine in engines.values():  # the ones started before the failure
            await engine.close()
        raise
    return TeacherSet(roster, engines)
