"""`VLLMTeacherEngine`: a vLLM server as a distillation teacher (`rollout_core.teacher_engine`), started and owned by
the process that builds it (as a vLLM rollout engine is: guarded so it never outlives its owner, output in
`<work_dir>/vllm-teacher.log`, `max_model_len` = the longest sequence a run scores). Each response is one prefill
asking for `prompt_logprobs` (`engine_adapters.vllm.teacher`). Registered as the teacher engine of kind `vllm`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from rollout_core.teacher_engine import Pair, TeacherSite, VLLMTeacherEngineConfig
from rollout_core.teacher_scores import TeacherScores
from rollout_core.vllm_families import read_model_type

from engine_adapters.vllm import VLLMServer, VLLMServerConfig, default_python
from engine_adapters.vllm.rollout_engine import start_healthy_vllm_server
from engine_adapters.vllm.teacher import VLLMTeacher

VLLM_TEACHER_LOG = "vllm-teacher.log"
VLLM_DEFAULT_MAX_LOGPROBS = 20  # vLLM's own `--max-logprobs` (vllm 0.32 `ModelConfig.max_logprobs`)


def teacher_server_config(cfg: VLLMTeacherEngineConfig, site: TeacherSite) -> VLLMServerConfig:
    """The teacher's server: no routing capture, a context of the longest sequence a run scores, and
    `--max-logprobs` raised to `teacher.top_k` when that is above vLLM's default (which would refuse the request;
    the vocabulary bounds top_k, `trainers.distillation.teacher.check_teacher`)."""
    python = Path(cfg.python) if cfg.python else default_python()
    return VLLMServerConfig(
        model=site.checkpoint_dir,
        model_type=read_model_type(site.checkpoint_dir),
        python=python,
        routing="none",
        max_model_len=site.max_len,
        startup_timeout_s=cfg.startup_timeout_s,
        extra_args=("--max-logprobs", str(max(VLLM_DEFAULT_MAX_LOGPROBS, site.top_k))),
    )


class VLLMTeacherEngine:
    def __init__(self, server: VLLMServer, teacher: VLLMTeacher) -> None:
        self.server, self.teacher = server, teacher
        self.busy_s, self.tokens = 0.0, 0

    @classmethod
    async def launch(cls, cfg: VLLMTeacherEngineConfig, site: TeacherSite) -> VLLMTeacherEngine:
        """Starts the server, waits for it off the event loop; any failure stops the server."""
        config = teacher_server_config(cfg, site)
        server = await start_healthy_vllm_server(config, Path(site.work_dir) / VLLM_TEACHER_LOG)
        teacher = VLLMTeacher(server.base_url, temperature=site.temperature, top_k=site.top_k)
        try:
            await teacher.score_only(site.vocab_size)
        except BaseException:
            await teacher.close()
            server.stop()
            raise
        return cls(server, teacher)

    async def score(self, pairs: Sequence[Pair]) -> list[TeacherScores]:
        t0 = time.perf_counter()
        try:
            return await self.teacher.score(pairs)
        finally:
            self.busy_s += time.perf_counter() - t0
            self.tokens += sum(len(p) + len(r) for p, r in pairs)

    async def close(self) -> None:
        try:
            await self.teacher.close()
        finally:
            self.server.stop()
