"""The tokenizer of a task: a byte-level BPE chat tokenizer (`moe_models.train_chat_tokenizer`) trained on the
task's own text, so the tiny models get a vocabulary the size of what the task says; the presets of production
vocabulary get a 151,669-id Qwen-layout tokenizer whose first merges are learned from the same text.

The corpus is every training example's demonstration rendered as a chat with the ChatML template: the prompt (its
chat messages, or one user message), then each model turn as an assistant message and each observation as a tool
message; plus one chat with a message of every role (the template's markers) and the task's alphabet (every
character of both splits' prompts and answers), so that everything the task encodes is in the vocabulary. So the
merges spell the task's words and the template's role names, digits stay one token each, and the special tokens
are the template's. The same task (its fingerprint: config and data files) always gives the same
tokenizer files, byte for byte, whatever the prompt format; `tokenizer_digest` hashes those files for cache keys.
moe_models (and so torch) is imported inside the functions: importing rl_tasks stays torch-free.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rl_tasks.example import CHAT_ROLES
from rl_tasks.model_presets import full_vocab_presets
from rl_tasks.renderer import Renderer
from rl_tasks.task import Task, TaskBuilder

if TYPE_CHECKING:
    from moe_models import ChatTokenizer
    from moe_models.checkpoint import SavableTokenizer


def _demonstration_chats(task: Task) -> Iterator[list[dict[str, str]]]:
    for example in task.splits.train:
        messages = Renderer.messages(example)
        for piece in task.demonstration(example):
            messages.append({"role": "assistant" if piece.trainable else "tool", "content": piece.text})
        yield messages


def tokenizer_corpus(task: Task) -> Iterator[str]:
    """The texts the task's tokenizer is trained on: each training demonstration rendered as a ChatML chat."""
    from moe_models.chat_template import CHATML_TEMPLATE, render_chat

    for messages in _demonstration_chats(task):
        yield render_chat(CHATML_TEMPLATE, messages, add_generation_prompt=False)
    markers = [{"role": role, "content": ""} for role in CHAT_ROLES]
    yield render_chat(CHATML_TEMPLATE, markers, add_generation_prompt=True)
    yield task.alphabet


_TRAINED: dict[tuple[str, bool], ChatTokenizer] = {}
_KEEP = 4


def build_task_tokenizer(task: Task, preset: str = "tiny") -> ChatTokenizer:
    """The task's tokenizer for a model preset (built once per task fingerprint in this process, then reused): a
    byte-level BPE of the task's own text, or for the presets of production vocabulary
    (`model_presets.full_vocab_presets`) the 151,669-id Qwen-layout tokenizer whose first merges are the task's
    (`moe_models.full_vocab`)."""
    full = preset in full_vocab_presets()
    key = (task.fingerprint(), full)
    if key not in _TRAINED:
        while len(_TRAINED) >= _KEEP:
            del _TRAINED[next(iter(_TRAINED))]
        if full:
            from moe_models.full_vocab import build_full_vocab_tokenizer

            _TRAINED[key] = build_full_vocab_tokenizer(tokenizer_corpus(task))
        else:
            from moe_models import train_chat_tokenizer

            _TRAINED[key] = train_chat_tokenizer(tokenizer_corpus(task))
    return _TRAINED[key]


def tokenizer_digest(tokenizer: SavableTokenizer) -> str:
    """SHA-256 over the files `tokenizer.save` writes (names and bytes, in name order)."""
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(tmp)
        for path in sorted(Path(tmp).iterdir()):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def task_renderer(task: Task | TaskBuilder, preset: str = "tiny") -> Renderer:
    """The task's tokenizer for a model preset (`rl_tasks.task_tokenizer`) under the task's prompt format."""
    built = as_task(task)
    return Renderer(build_task_tokenizer(built, preset), built.prompt_format)  # type: ignore[arg-type]


def as_task(task: Task | TaskBuilder) -> Task:
    """`task` itself, or the Task its config builds (the apps still pass a `ToyTaskConfig`)."""
    if isinstance(task, Task):
        return task
    build = getattr(task, "build", None)
    built = build() if callable(build) else None
    if not isinstance(built, Task):
        raise ValueError(f"expected a Task or a task config whose build() gives one, got {type(task).__name__}")
    return built
