"""The teacher of on-policy distillation: its config section, its checkpoint (given, or the cached default teacher)
and the checks that must pass before a run trains against it.

Several teachers: `teacher.sources` names one per data source (`SOURCE=DIR`); a sample is scored by its data
source's named teacher, and by the default teacher when its source names none (adding named teachers never removes
the default one). `TeacherRoster` is that choice: `key_of(source)` gives the teacher key (the source, or
`DEFAULT_TEACHER`).

The default teacher is a model of the student's family at `teacher.model_preset` given a longer supervised warm-up on
the run's task
(`teacher.warmup_steps`), cached like the student's base (`trainers.warmup.ensure_base_checkpoint`: same key scheme,
same atomic build), so the first run builds it and later runs reuse it.

Checks (`check_teacher`), each a got/expected error before the first step: the teacher's tokenizer must be the
student's (same vocabulary and special tokens: a token id must mean one string to both); its context must hold the
longest sequence a run scores; `top_k` must fit its vocabulary; and `teacher.temperature` must equal
`rollout.temperature` (checked at parse time, `check_temperature`): the student's log-probs are taken at the
rollout temperature, and a log-ratio between distributions at two temperatures is not a KL of either.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rl_tasks.model_config import ModelConfig
from rl_tasks.model_presets import model_preset_names
from rollout_core.teacher_engine import NativeTeacherEngineConfig, TeacherEngineConfig, TeacherSite
from run_lifecycle.fields import help_field

from trainers.warmup import WarmupConfig, WarmupResult, ensure_base_checkpoint

if TYPE_CHECKING:
    from moe_models import CharTokenizer, ChatTokenizer
    from rl_tasks.task import Task


@dataclass
class TeacherConfig:
    """Read only with `algorithm.kind opd`."""

    checkpoint: str = help_field(
        "teacher model directory (HF layout, with the student's tokenizer); empty: the cached default teacher, a "
        "model_preset model warmed up warmup_steps steps on the run's task (built on first use)",
        "",
    )
    model_preset: str = help_field("the default teacher's MoEConfig preset", "tiny")
    warmup_steps: int = help_field("the default teacher's supervised warm-up steps", 1000)
    temperature: float = help_field("temperature of the teacher's log-probs; must equal rollout.temperature", 1.0)
    top_k: int = help_field(
        "teacher top-k ids and log-probs kept per token, for metrics (0: the sampled token only)", 0
    )
    torch_threads: int = help_field("torch threads of a teacher replica's process (async_ppo)", 1)
    replicas: int = help_field("teacher replicas, Ray actors in a placement group of their own (async_ppo)", 1)
    cpus: float = help_field("CPUs reserved per teacher replica (async_ppo)", 1.0)
    max_restarts: int = help_field(
        "restarts of a replica whose process died; its pending calls run again (async_ppo)", 3
    )
    sources: tuple[str, ...] = help_field(
        "named teachers, SOURCE=DIR each: a sample of data source SOURCE is scored by the teacher in DIR (an HF model "
        "directory with the student's tokenizer); samples of other sources by the default teacher",
        (),
    )
    engine: TeacherEngineConfig = field(default_factory=NativeTeacherEngineConfig)

    def __post_init__(self) -> None:
        if self.model_preset not in model_preset_names():
            raise ValueError(
                f"teacher.model_preset: expected one of {list(model_preset_names())}, got {self.model_preset!r}"
            )
        if self.warmup_steps < 1 or self.top_k < 0 or not self.temperature > 0:
            raise ValueError(
                f"teacher: expected warmup_steps >= 1, top_k >= 0, temperature > 0; got {self.warmup_steps}, "
                f"{self.top_k}, {self.temperature}"
            )
        if self.torch_threads < 1 or self.replicas < 1 or not self.cpus > 0 or self.max_restarts < 0:
            raise ValueError(
                f"teacher: expected torch_threads >= 1, replicas >= 1, cpus > 0, max_restarts >= 0; got "
                f"{self.torch_threads}, {self.replicas}, {self.cpus}, {self.max_restarts}"
            )
        if self.checkpoint and not (Path(self.checkpoint) / "config.json").is_file():
            raise ValueError(f"teacher.checkpoint: expected a model directory with config.json, got {self.checkpoint}")
        self.named()

    def named(self) -> dict[str, Path]:
        """`teacher.sources` as data source -> model directory; raises ValueError (got/expected) on a bad entry."""
        out: dict[str, Path] = {}
        for entry in self.sources:
            source, sep, directory = entry.partition("=")
            if not sep or not source or not directory:
                raise ValueError(f"teacher.sources: expected SOURCE=DIR entries, got {entry!r}")
            if source in out:
                raise ValueError(f"teacher.sources: expected one teacher per data source, got {source!r} twice")
            if not (Path(directory) / "config.json").is_file():
                raise ValueError(
                    f"teacher.sources {source}: expected a model directory with config.json, got {directory}"
                )
            out[source] = Path(directory).resolve()
        return out

    def warmup(self, student: WarmupConfig) -> WarmupConfig:
        """The default teacher's warm-up: the student's, longer."""
        return dataclasses.replace(student, steps=self.warmup_steps)

    def model(self, student: ModelConfig) -> ModelConfig:
        """The default teacher's model: the student's family at the teacher's preset (built by the warm-up with the
        task's tokenizer, so a student brought by `model.path` needs `teacher.checkpoint`: see RecipeConfig)."""
        return ModelConfig(family=student.family, preset=self.model_preset)


def check_temperature(teacher: TeacherConfig, rollout_temperature: float) -> None:
    if teacher.temperature != rollout_temperature:
        raise ValueError(
            f"teacher.temperature: expected the student's training temperature rollout.temperature "
            f"{rollout_temperature}, got {teacher.temperature} (a log-ratio of two temperatures is no KL)"
        )


@dataclass(frozen=True)
class TeacherCheckpoint:
    """Where the teacher is, and its validation accuracy when known (the default teacher's, measured when built)."""

    directory: Path
    val_accuracy: float | None
    warmup: WarmupResult | None


DEFAULT_TEACHER = ""  # the default teacher's key (a data source is never empty)


@dataclass(frozen=True)
class TeacherRoster:
    """Every teacher of a run, by key: `DEFAULT_TEACHER` and one per named data source."""

    default: TeacherCheckpoint
    named: dict[str, TeacherCheckpoint] = field(default_factory=dict)

    def key_of(self, data_source: str) -> str:
        return data_source if data_source in self.named else DEFAULT_TEACHER

    def items(self) -> list[tuple[str, TeacherCheckpoint]]:
        """`(key, checkpoint)`, the default teacher first."""
        return [(DEFAULT_TEACHER, self.default), *self.named.items()]

    @staticmethod
    def label(key: str) -> str:
        return key or "default"


def ensure_teacher(
    cfg: TeacherConfig, task: Task, student_warmup: WarmupConfig, student_model: ModelConfig, cache_root: Path
) -> TeacherCheckpoint:
    if cfg.checkpoint:
        return TeacherCheckpoint(Path(cfg.checkpoint).resolve(), None, None)
    built = ensure_base_checkpoint(task, cfg.warmup(student_warmup), cache_root, cfg.model(student_model))
    return TeacherCheckpoint(built.checkpoint_dir, built.val_accuracy, built)


def ensure_roster(
    cfg: TeacherConfig, task: Task, student_warmup: WarmupConfig, student_model: ModelConfig, cache_root: Path
) -> TeacherRoster:
    """The default teacher (given, or the cached default built on first use) and the named ones; raises ValueError
    when a named data source is not one of the task's."""
    named = cfg.named()
    sources = {e.data_source for e in (*task.splits.train, *task.splits.validation)}
    unknown = sorted(set(named) - sources)
    if unknown:
        raise ValueError(f"teacher.sources: expected data sources of the task {sorted(sources)}, got {unknown}")
    default = ensure_teacher(cfg, task, student_warmup, student_model, cache_root)
    return TeacherRoster(default, {k: TeacherCheckpoint(v, None, None) for k, v in named.items()})


def check_roster(
    cfg: TeacherConfig, roster: TeacherRoster, student: ChatTokenizer | CharTokenizer, max_len: int
) -> None:
    """`check_teacher` on every teacher of the roster."""
    for _, teacher in roster.items():
        check_teacher(cfg, teacher, student, max_len)


def teacher_site(
    cfg: TeacherConfig, teacher: TeacherCheckpoint, max_len: int, work_dir: str, index: int = 0, *, vocab_size: int
) -> TeacherSite:
    """`vocab_size`: the student's tokenizer's ids (the teacher shares the tokenizer, `check_teacher`)."""
    return TeacherSite(str(teacher.directory), cfg.temperature, cfg.top_k, max_len, work_dir, index, vocab_size)


def check_teacher(
    cfg: TeacherConfig, teacher: TeacherCheckpoint, student: ChatTokenizer | CharTokenizer, max_len: int
) -> None:
    """Raises ValueError (got/expected) when the teacher cannot score this run's samples."""
    from moe_models import load_tokenizer

    where = teacher.directory
    try:
        theirs = load_tokenizer(where)
    except ValueError as exc:
        raise ValueError(
            f"teacher.checkpoint {where}: expected the student's tokenizer beside the model ({exc})"
        ) from None
    if theirs.vocab() != student.vocab() or theirs.special_ids != student.special_ids:
        only_t = sorted(set(theirs.vocab()) - set(student.vocab()))[:5]
        only_s = sorted(set(student.vocab()) - set(theirs.vocab()))[:5]
        raise ValueError(
            f"teacher.checkpoint {where}: expected the student's tokenizer (vocab {student.vocab_size}, specials "
            f"{student.special_ids}), got vocab {theirs.vocab_size}, specials {theirs.special_ids} (tokens only the "
            f"teacher has: {only_t}; only the student: {only_s}; or the same tokens with other ids)"
        )
    model = json.loads((where / "config.json").read_text())
    context, vocab = int(model["max_position_embeddings"]), int(model["vocab_size"])
    if context < max_len:
        raise ValueError(
            f"teacher.checkpoint {where}: a run's longest sequence (prompt + every response token) is {max_len} "
            f"tokens; expected a teacher context of at least that, got max_position_embeddings {context}"
        )
    if cfg.top_k > vocab:
        raise ValueError(f"teacher.top_k: expected at most the teacher's vocabulary {vocab}, got {cfg.top_k}")
