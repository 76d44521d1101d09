"""Verifiable-reward tasks as components: the toy addition/sorting task, the scratchpad task (sorting after a
long-tailed selection-sort trace), tasks read from verl-style dataset files, a multi-turn calculator task, their
reward functions, the `Task` interface the warm-up and the rollout consume (`<Kind>TaskConfig.build()` gives a
`Task`), and the `Renderer` that turns a task's prompts and episodes into token ids under its prompt format (by
default the tokenizer's chat template).

Torch-free: the warm-up that trains a base on a task's demonstrations is `trainers.warmup`, the greedy evaluation
`engine_adapters.native.greedy_eval`.
"""

from rl_tasks.addition import ADDITION_SOURCE, AdditionSource
from rl_tasks.calculator_env import CALCULATOR_SOURCE, CalculatorEnv
from rl_tasks.calculator_reward import CalculatorReward
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.dispatch import RewardByDataSource, UnknownDataSourceError
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import ChatMessage, TaskExample
from rl_tasks.gsm8k import Gsm8kReward, extract_final_answer, normalize_number
from rl_tasks.loaders import check_dataset_path, load_dataset_file, load_jsonl, load_parquet
from rl_tasks.model_presets import model_preset_names
from rl_tasks.renderer import PROMPT_FORMATS, PromptFormat, Renderer
from rl_tasks.reward import RewardFn, RewardResult, RewardStats, ScoredResponse, ScoreStatus, score_safely
from rl_tasks.scratchpad_task import ScratchpadTaskConfig
from rl_tasks.sort_trace import SORT_TRACE_SOURCE, FinalAnswerReward, SortTraceSource, sort_trace
from rl_tasks.sorting import SORT_SOURCE, SortSource
from rl_tasks.task import Piece, Task, TaskBuilder, TaskSplits, ToolEnv
from rl_tasks.toy_task import ToyTaskConfig, build_splits, toy_reward_fn

__all__ = [
    "ADDITION_SOURCE",
    "CALCULATOR_SOURCE",
    "PROMPT_FORMATS",
    "SORT_SOURCE",
    "SORT_TRACE_SOURCE",
    "AdditionSource",
    "CalculatorEnv",
    "CalculatorReward",
    "CalculatorTaskConfig",
    "ChatMessage",
    "DatasetTaskConfig",
    "ExactMatchReward",
    "FinalAnswerReward",
    "Gsm8kReward",
    "Piece",
    "PromptFormat",
    "Renderer",
    "RewardByDataSource",
    "RewardFn",
    "RewardResult",
    "RewardStats",
    "ScoreStatus",
    "ScoredResponse",
    "ScratchpadTaskConfig",
    "SortSource",
    "SortTraceSource",
    "Task",
    "TaskBuilder",
    "TaskExample",
    "TaskSplits",
    "ToolEnv",
    "ToyTaskConfig",
    "UnknownDataSourceError",
    "build_splits",
    "check_dataset_path",
    "extract_final_answer",
    "load_dataset_file",
    "load_jsonl",
    "load_parquet",
    "model_preset_names",
    "normalize_number",
    "score_safely",
    "sort_trace",
    "toy_reward_fn",
]
