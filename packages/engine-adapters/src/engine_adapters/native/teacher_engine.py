"""`NativeTeacherEngine`: `engine_adapters.native.TeacherScorer` as a distillation teacher
(`rollout_core.teacher_engine`),
on one worker thread of its own, so its prefills run beside the rollout engine's decode steps (torch releases the
GIL in its kernels) and never block the event loop. Registered as the teacher engine of kind `native`."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from rollout_core.teacher_engine import NativeTeacherEngineConfig, Pair, TeacherSite
from rollout_core.teacher_scores import TeacherScores

from engine_adapters.native.scoring import ScoreRequest, TeacherScorer


class NativeTeacherEngine:
    def __init__(self, cfg: NativeTeacherEngineConfig, site: TeacherSite) -> None:
        self.scorer = TeacherScorer.load(
            site.checkpoint_dir,
            temperature=site.temperature,
            top_k=site.top_k,
            batch_tokens=cfg.batch_tokens,
            vocab_size=site.vocab_size,
        )
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="teacher")
        self.busy_s, self.tokens = 0.0, 0

    def _score(self, requests: list[ScoreRequest]) -> list[TeacherScores]:
        t0 = time.perf_counter()
        try:
            return self.scorer.score(requests)
        finally:
            self.busy_s += time.perf_counter() - t0
            self.tokens += sum(r.num_tokens for r in requests)

    async def score(self, pairs: Sequence[Pair]) -> list[TeacherScores]:
        requests = [ScoreRequest(p, r) for p, r in pairs]
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._score, requests)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)
