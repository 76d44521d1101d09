"""The `teacher.engine` section: what serves the distillation teacher's scoring call (a tagged union chosen by
`kind`), and the `TeacherEngine` protocol each kind builds. One call scores many responses (the engine batches
them); `busy_s` and `tokens` count the time spent in calls and the tokens scored (prompt + response). Standard
library only (`--help` imports it); `build()` opens the teacher engine registered for the kind
(`rollout_core.engine_registry`: engine-adapters' `native` and `vllm`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from rollout_core.config_fields import help_field
from rollout_core.engine_registry import TEACHER_ENGINES, open_registered
from rollout_core.server_engine_config import vllm_checkpoint_refusal, vllm_family_refusal

if TYPE_CHECKING:
    from rollout_core.teacher_scores import TeacherScores


Pair = tuple[Sequence[int], Sequence[int]]  # (prompt_ids, response_ids)


class TeacherEngine(Protocol):
    busy_s: float
    tokens: int

    async def score(self, pairs: Sequence[Pair]) -> list[TeacherScores]:
        """One TeacherScores per pair, in order (rows: the response tokens, in the student's shift)."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class TeacherSite:
    """What a teacher engine serves: the teacher checkpoint, the temperature and top-k of its log-probs, the longest
    sequence it scores (prompt + response), a working directory of its own (logs), its replica index and the
    tokenizer's ids it scores (`vocab_size`, the student's tokenizer; None: every embedding row)."""

    checkpoint_dir: str
    temperature: float
    top_k: int
    max_len: int
    work_dir: str
    index: int = 0
    vocab_size: int | None = None


@dataclass
class NativeTeacherEngineConfig:
    """The native engine's scoring call in the owning process (`engine_adapters.native.TeacherScorer`, on its own
    thread)."""

    kind: Literal["native"] = "native"

    def unsupported_family(self, family: str) -> str:
        """ "": the native engine scores every family."""
        return ""

    batch_tokens: int = help_field("padded tokens per teacher prefill", 4096)

    def __post_init__(self) -> None:
        if self.batch_tokens < 1:
            raise ValueError(f"teacher.engine.batch_tokens: expected >= 1, got {self.batch_tokens}")

    async def build(self, site: TeacherSite) -> TeacherEngine:
        """`engine_adapters.native.teacher_engine.NativeTeacherEngine`, registered as kind `native`."""
        return await open_registered(TEACHER_ENGINES, self, site)


@dataclass
class VLLMTeacherEngineConfig:
    """A vLLM server started by the process that owns the teacher, from its own environment
    (`scripts/setup_vllm_env.sh`), asked for `prompt_logprobs` (one prefill per response)."""

    kind: Literal["vllm"] = "vllm"
    python: str = help_field("python of the vLLM environment (empty: .vllm-env/bin/python)", "")
    startup_timeout_s: float = help_field("seconds to wait for the server to become healthy", 600.0)

    def __post_init__(self) -> None:
        if not self.startup_timeout_s > 0:
            raise ValueError(f"teacher.engine.startup_timeout_s: expected > 0, got {self.startup_timeout_s}")

    def unsupported_family(self, family: str) -> str:
        """Why a vLLM teacher cannot serve a warm-up model of `family`, or "" (the vLLM adapter's table)."""
        return vllm_family_refusal("teacher.engine vllm", family)

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        return vllm_checkpoint_refusal("teacher.engine vllm", checkpoint_dir)

    async def build(self, site: TeacherSite) -> TeacherEngine:
        """`engine_adapters.vllm.teacher_engine.VLLMTeacherEngine`, registered as kind `vllm`."""
        return await open_registered(TEACHER_ENGINES, self, site)


TeacherEngineConfig = NativeTeacherEngineConfig | VLLMTeacherEngineConfig
