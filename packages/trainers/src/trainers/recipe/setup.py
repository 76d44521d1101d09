"""RunSetup: what a run prepares before anything trains: its directory (allocated, locked) and config record, the
task, the base checkpoint (the user's `model.path`, else the cached warm-up of `model.family`), the tokenizer (and
the task's renderer over it), the vocabulary every engine and trainer scores, the pad id and the lengths every
engine must fit.

Everything that can be checked without training is checked before the run directory is touched (`check_run`, which
the apps run while parsing the command line): the tokenizer against the checkpoint's embedding, its eos ids, a chat
template that renders a user message, a response budget that holds the longest answer, the context every call needs
against the model's positions; a group size of 1 with a group-relative estimator is a warning.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path

from moe_models import CharTokenizer, ChatTokenizer, MoEConfig, load_config, load_tokenizer
from rl_tasks.example import TaskExample
from rl_tasks.model_config import ModelConfig
from rl_tasks.renderer import Renderer
from rl_tasks.task import Task
from rl_tasks.task_tokenizer import task_renderer
from run_lifecycle import MetricsLog, RunDir, RunLock
from run_lifecycle.claim import claim_run_dir

from trainers.distillation.stream import build_teachers
from trainers.distillation.teacher_set import TeacherSet
from trainers.recipe.config import RecipeConfig
from trainers.warmup import (
    WarmupResult,
    build_base_model_config,
    default_response_budget,
    ensure_base_checkpoint,
)

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
    tokenizer: ChatTokenizer | CharTokenizer  # the run's (`run_tokenizer`)
    vocab_size: int  # the tokenizer's ids: every engine and trainer scores these only (the embedding may pad beyond)
    pad_id: int  # fills batches past each sequence's end (`choose_pad_id`)
    max_new_tokens: int  # per turn
    max_len: int  # every engine's context: longest prompt + the whole response (every turn and observation)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.base_dir)

    @functools.cached_property
    def renderer(self) -> Renderer:
        """The task's prompts and responses under its prompt format, with the run's tokenizer."""
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


@dataclass(frozen=True)
class RunPlan:
    """What the checks of a run computed before anything is built (`check_run`)."""

    task: Task
    tokenizer: ChatTokenizer | CharTokenizer
    vocab_size: int
    pad_id: int
    max_new_tokens: int
    max_len: int


def run_tokenizer(model: ModelConfig, base_dir: str | Path) -> ChatTokenizer | CharTokenizer:
    """The run's tokenizer: `model.tokenizer`'s folder, else the base checkpoint's own, with the chat template's
    options; a response also ends at every eos id the base checkpoint's config.json and generation_config.json
    declare."""
    folder = model.tokenizer or base_dir
    return load_tokenizer(folder, template_options=model.template_options(), checkpoint=base_dir)


def run_renderer(model: ModelConfig, base_dir: str | Path, task: Task) -> Renderer:
    """The task's renderer over the run's tokenizer (what every actor of a run uses)."""
    return Renderer(run_tokenizer(model, base_dir), task.prompt_format)  # type: ignore[arg-type]


def base_model_config(cfg: RecipeConfig, task: Task, renderer: Renderer) -> MoEConfig:
    """The base model's config: the checkpoint's (`model.path`), else the warm-up's (`model.family`, `.preset`)."""
    if cfg.model.path:
        return load_config(cfg.model.path)
    return build_base_model_config(task, cfg.warmup, renderer.tokenizer, cfg.model)  # type: ignore[return-value]


_PLANS: dict[str, RunPlan] = {}


def check_run(cfg: RecipeConfig) -> RunPlan:
    """Every check that needs the task, the tokenizer and the base's config but nothing trained; raises ValueError
    with got/expected (the apps call it while parsing the command line: exit 2, no run directory). The result is
    kept per process for the same settings, so `prepare_run` does not redo it."""
    key = repr((cfg.task, cfg.model, cfg.warmup, cfg.rollout.max_new_tokens))
    if key not in _PLANS:
        _PLANS.clear()
        _PLANS[key] = _plan(cfg)
    return _PLANS[key]


def _plan(cfg: RecipeConfig) -> RunPlan:
    task = cfg.task.build()
    renderer = (
        run_renderer(cfg.model, cfg.model.path, task) if cfg.model.path else task_renderer(task, cfg.model.preset)
    )
    model = base_model_config(cfg, task, renderer)
    tok = renderer.tokenizer
    vocab = check_vocabulary(tok, model, cfg.model.path or f"the model.preset {cfg.model.preset} warm-up")
    if task.prompt_format == "chat":
        check_chat_template(renderer)
    max_new = cfg.rollout.max_new_tokens or default_response_budget(task)
    check_answer_budget(task, renderer, max_new, explicit=cfg.rollout.max_new_tokens > 0)
    splits = task.splits
    longest_prompt = max(len(renderer.prompt_ids(ex)) for ex in (*splits.train, *splits.validation))
    max_len = longest_prompt + response_budget(task, max_new, renderer)
    if max_len > model.max_position_embeddings:
        which = cfg.model.path or f"model.preset {cfg.model.preset}"
        raise ValueError(
            f"rollout.max_new_tokens {max_new}: the longest prompt ({longest_prompt} tokens) plus the response budget "
            f"({max_len - longest_prompt} tokens) needs {max_len} positions; expected at most the model's "
            f"max_position_embeddings {model.max_position_embeddings} ({which})"
        )
    return RunPlan(task, tok, vocab, choose_pad_id(tok, model), max_new, max_len)


def check_vocabulary(tokenizer: ChatTokenizer | CharTokenizer, model: MoEConfig, where: str) -> int:
    """The tokenizer's size, checked against the checkpoint's embedding: a tokenizer id beyond the embedding's rows
    would index past them."""
    if tokenizer.vocab_size > model.vocab_size:
        raise ValueError(
            f"tokenizer: got {tokenizer.vocab_size} ids, expected at most the checkpoint's {model.vocab_size} "
            f"embedding rows (config.json vocab_size, {where}): this tokenizer does not belong to this checkpoint"
        )
    return tokenizer.vocab_size


def check_chat_template(renderer: Renderer) -> None:
    """The chat template renders a user message with a generation prompt, the message's text in it."""
    probe = "Is 2 + 2 = 4?"
    try:
        text = renderer.tokenizer.render([{"role": "user", "content": probe}], add_generation_prompt=True)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise ValueError(f"chat template: expected it to render a user message, got {exc}") from exc
    if probe not in text:
        raise ValueError(f"chat template: expected a user message's text in its rendering, got {text!r:.200}")


def check_answer_budget(task: Task, renderer: Renderer, max_new_tokens: int, *, explicit: bool) -> None:
    """A response budget must hold the longest demonstrated model turn plus the EOS that closes it."""
    tok = renderer.tokenizer
    longest = max(
        len(tok.encode(piece.text)) + 1
        for ex in task.splits.train
        for piece in task.demonstration(ex)
        if piece.trainable
    )
    if max_new_tokens < longest:
        which = "rollout.max_new_tokens" if explicit else "the task's default response budget"
        raise ValueError(
            f"{which}: got {max_new_tokens} tokens, expected at least {longest}: the longest answer of the training "
            "rows plus the EOS that ends it"
        )


def choose_pad_id(tokenizer: ChatTokenizer | CharTokenizer, model: MoEConfig) -> int:
    """The id that fills batches past each sequence: the tokenizer's pad token, else (a tokenizer without one) the
    first embedding row beyond the tokenizer's ids when the checkpoint pads its vocabulary (no text holds it, no
    engine samples it: never trained on), else the EOS id. Padding is told apart by lengths, never by comparing ids,
    so a pad equal to the EOS costs the EOS nothing."""
    if tokenizer.pad_id is not None:
        return tokenizer.pad_id
    pad = tokenizer.vocab_size if model.vocab_size > tokenizer.vocab_size else tokenizer.eos_id
    what = "the first embedding row beyond the tokenizer" if pad != tokenizer.eos_id else "the EOS id"
    warnings.warn(f"tokenizer: no pad_token; batches are padded with id {pad} ({what}), never trained on", stacklevel=2)
    return pad


def warn_singleton_groups(cfg: RecipeConfig) -> None:
    advantage = getattr(cfg.algorithm, "advantage", None)
    if cfg.rollout.samples_per_prompt == 1 and advantage in GROUP_ESTIMATORS:
        warnings.warn(
            f"rollout.samples_per_prompt 1 with algorithm.advantage {advantage!r}: every group is a single sample, so "
            "the advantage is the raw reward (no baseline); counted per step as rollout/singleton_groups",
            stacklevel=2,
        )


def prepare_run(cfg: RecipeConfig, *, resume: bool = False, runs_root: Path = Path("runs")) -> RunSetup:
    """Checks (`check_run`), then claims the run directory, then builds or reads the cached base checkpoint."""
    plan = check_run(cfg)
    warn_singleton_groups(cfg)
    run, lock = claim_run_dir(cfg, resume=resume, runs_root=runs_root)
    try:
        warmup = None
        if cfg.model.path:
            base_dir = Path(cfg.model.path).resolve()
        else:
            warmup = ensure_base_checkpoint(plan.task, cfg.warmup, Path(cfg.run.warmup_cache).resolve(), cfg.model)
            base_dir = warmup.checkpoint_dir
    except BaseException:
        lock.release()
        raise
    return RunSetup(
        cfg,
        run,
        lock,
        MetricsLog(run.metrics),
        plan.task,
        base_dir,
        warmup,
        plan.tokenizer,
        plan.vocab_size,
        plan.pad_id,
        plan.max_new_tokens,
        plan.max_len,
    )


def response_budget(task: Task, max_new_tokens: int, renderer: Renderer) -> int:
    """The most tokens one response can hold: one turn's budget, or for a task with a tool every turn's budget
    and the longest observation after each turn but the last (its text at most one token per UTF-8 byte, plus
    what the prompt format wraps it in)."""
    if task.tool is None:
        return max_new_tokens
    turns = task.tool.max_turns
    observation = task.tool.max_observation_chars * task.max_char_bytes + renderer.observation_overhead()
    return turns * max_new_tokens + (turns - 1) * observation
