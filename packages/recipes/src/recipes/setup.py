"""RunSetup: what a run prepares before anything trains: its directory and config file, the task, the cached
warm-up base checkpoint, the tokenizer and the lengths every engine must fit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from moe_models import CharTokenizer, load_tokenizer
from rl_tasks.greedy_eval import encode_prompt
from rl_tasks.task import Task
from rl_tasks.warmup import WarmupResult, ensure_base_checkpoint
from run_config import to_toml
from run_logging import MetricsLog, RunDir

from recipes.config import RecipeConfig


@dataclass
class RunSetup:
    cfg: RecipeConfig
    run: RunDir
    log: MetricsLog
    task: Task
    base: WarmupResult
    tokenizer: CharTokenizer
    max_new_tokens: int  # per turn
    max_len: int  # every engine's context: longest prompt + the whole response (every turn and observation)

    @property
    def checkpoint_dir(self) -> str:
        return str(self.base.checkpoint_dir)

    def val_examples(self) -> tuple:
        n = self.cfg.validation.max_prompts
        val = self.task.splits.validation
        return val[:n] if n else val


def prepare_run(cfg: RecipeConfig) -> RunSetup:
    """Creates the run directory (absolute: actors may run elsewhere) and writes `config.toml`; builds or reads the
    cached base checkpoint."""
    run = RunDir.create(Path(cfg.run.dir).resolve())
    run.config.write_text(to_toml(cfg))
    task = cfg.task.build()
    base = ensure_base_checkpoint(task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())
    tokenizer = load_tokenizer(base.checkpoint_dir)
    max_new = cfg.rollout.max_new_tokens or task.max_answer_chars + 1
    splits = task.splits
    longest_prompt = max(len(encode_prompt(tokenizer, ex.prompt)) for ex in (*splits.train, *splits.validation))
    return RunSetup(cfg, run, MetricsLog(run.metrics), task, base, tokenizer, max_new,
                    longest_prompt + response_budget(task, max_new))  # fmt: skip


def response_budget(task: Task, max_new_tokens: int) -> int:
    """The most tokens one response can hold: one turn's budget, or for a task with a tool every turn's budget
    and the longest observation after each turn but the last."""
    if task.tool is None:
        return max_new_tokens
    turns = task.tool.max_turns
    return turns * max_new_tokens + (turns - 1) * task.tool.max_observation_chars
