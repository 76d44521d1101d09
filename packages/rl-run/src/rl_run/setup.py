"""RunSetup: what a run prepares before anything trains: its directory (allocated, locked) and config record, the
task, the base checkpoint (the user's `model.path`, else the cached warm-up of `model.family`), the tokenizer (and
the task's renderer over it) and the lengths every engine must fit.

Everything that can be checked without training is checked before the run directory is touched: the context
every call needs against the model's positions, a group size of 1 with a group-relative estimator (a warning).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

from distillation.stream import build_teachers
from distillation.teacher_set import TeacherSet
from moe_models import CharTokenizer, ChatTokenizer, MoEConfig, load_config, load_tokenizer
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.task import Task
from rl_tasks.warmup import WarmupResult, build_base_model_config, ensure_base_checkpoint, task_renderer, turn_budget
from run_logging import MetricsLog, RunDir, RunLock
from run_loop.claim import claim_run_dir

from rl_run.config import RecipeConfig

GROUP_ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline")


@dataclass
class RunSetup:
    cfg: RecipeConfig
    run: RunDir
    lock: RunLock  # held until the run ends (`close`); a second process cannot use the run directory meanwhile
    log: MetricsLog
    task: Task
    base_dir: Path  # the base checkpoint: policy, reference and the default teacher's family
    warmup: WarmupResult | None  # how the base was built; None for a checkpoint the user brings (model.path)
    tokenizer: ChatTokenizer | CharTokenizer  # the base checkpoint's
    max_new_tokens: int  # per turn
    max_len: int  # every engine's context: longest prompt + the whole response (every turn and observation)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.base_dir)

    @functools.cached_property
    def renderer(self) -> Renderer:
        """The task's prompts and responses under its prompt format, with the base checkpoint's tokenizer."""
        return Renderer(self.tokenizer, self.task.prompt_format)  # type: ignore[arg-type]

    def val_examples(self) -> tuple[TaskExample, ...]:
        n = self.cfg.validation.max_prompts
        val = self.task.splits.validation
        return val[:n] if n else val

    async def teachers(self) -> TeacherSet:
        """The run's distillation teachers, built and checked against this run's student (`teacher` section)."""
        return await build_teachers(
            self.cfg.teacher,
            task=self.task,
            student_warmup=self.cfg.warmup,
            student_model=self.cfg.model,
            warmup_cache=Path(self.cfg.run.warmup_cache).resolve(),
            tokenizer=self.tokenizer,
            max_len=self.max_len,
            run_root=self.run.root,
        )

    def close(self) -> None:
        self.lock.release()


def checkpoint_renderer(checkpoint_dir: str | Path, task: Task) -> Renderer:
    """The task's renderer over the tokenizer saved beside a checkpoint (what every actor of a run uses)."""
    return Renderer(load_tokenizer(checkpoint_dir), task.prompt_format)  # type: ignore[arg-type]


def base_renderer(cfg: RecipeConfig, task: Task) -> Renderer:
    """The task under the base's tokenizer: the checkpoint's (`model.path`), else the one the warm-up trains."""
    return checkpoint_renderer(cfg.model.path, task) if cfg.model.path else task_renderer(task)


def base_model_config(cfg: RecipeConfig, task: Task, renderer: Renderer) -> MoEConfig:
    """The base model's config: the checkpoint's (`model.path`), else the warm-up's (`model.family`, `.preset`)."""
    if cfg.model.path:
        return load_config(cfg.model.path)
    return build_base_model_config(task, cfg.warmup, renderer.tokenizer, cfg.model)  # type: ignore[return-value]


def check_lengths(cfg: RecipeConfig, task: Task) -> tuple[int, int]:
    """`(max_new_tokens per turn, max_len)`; raises when a call could exceed the model's positions."""
    renderer = base_renderer(cfg, task)
    max_new = cfg.rollout.max_new_tokens or turn_budget(task)
    splits = task.splits
    longest_prompt = max(len(renderer.prompt_ids(ex)) for ex in (*splits.train, *splits.validation))
    max_len = longest_prompt + response_budget(task, max_new, renderer)
    model = base_model_config(cfg, task, renderer)
    if max_len > model.max_position_embeddings:
        which = cfg.model.path or f"model.preset {cfg.model.preset}"
        raise ValueError(
            f"rollout.max_new_tokens {max_new}: the longest prompt ({longest_prompt} tokens) plus the response budget "
            f"({max_len - longest_prompt} tokens) needs {max_len} positions; expected at most the model's "
            f"max_position_embeddings {model.max_position_embeddings} ({which})"
        )
    return max_new, max_len


def warn_singleton_groups(cfg: RecipeConfig) -> None:
    advantage = getattr(cfg.algorithm, "advantage", None)
    if cfg.rollout.samples_per_prompt == 1 and advantage in GROUP_ESTIMATORS:
        warnings.warn(
            f"rollout.samples_per_prompt 1 with algorithm.advantage {advantage!r}: every group is a single sample, so "
            "the advantage is the raw reward (no baseline); counted per step as rollout/singleton_groups",
            stacklevel=2,
        )


def prepare_run(cfg: RecipeConfig, *, resume: bool = False, runs_root: Path = Path("runs")) -> RunSetup:
    """Checks, then claims the run directory, then builds or reads the cached base checkpoint."""
    task = cfg.task.build()
    max_new, max_len = check_lengths(cfg, task)
    warn_singleton_groups(cfg)
    run, lock = claim_run_dir(cfg, resume=resume, runs_root=runs_root)
    try:
        warmup = None
        if cfg.model.path:
            base_dir = Path(cfg.model.path).resolve()
        else:
            warmup = ensure_base_checkpoint(task, cfg.warmup, Path(cfg.run.warmup_cache).resolve(), cfg.model)
            base_dir = warmup.checkpoint_dir
        tokenizer = load_tokenizer(base_dir)
    except BaseException:
        lock.release()
        raise
    return RunSetup(cfg, run, lock, MetricsLog(run.metrics), task, base_dir, warmup, tokenizer, max_new, max_len)


def response_budget(task: Task, max_new_tokens: int, renderer: Renderer) -> int:
    """The most tokens one response can hold: one turn's budget, or for a task with a tool every turn's budget
    and the longest observation after each turn but the last (its text at most one token per UTF-8 byte, plus
    what the prompt format wraps it in)."""
    if task.tool is None:
        return max_new_tokens
    turns = task.tool.max_turns
    observation = task.tool.max_observation_chars * task.max_char_bytes + renderer.observation_overhead()
    return turns * max_new_tokens + (turns - 1) * observation
