"""RolloutEngine: an `Engine` as a rollout loop drives it, plus the two calls a loop needs besides generating: take
new weights (`push`) and shut down (`close`). Every `rollout.engine` kind builds one object that is both (the native
engine itself; the vLLM and SGLang adapters with the server they own), so a loop holds one engine, not a wrapper.

RolloutSite: what the run decides for the engine it builds; FolderWriter: how the run's model family writes weights
as a Hugging Face folder, for the engines that reload weights from files (vLLM, SGLang)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from rollout_core.engine import Engine

PauseMode = Literal["keep", "abort"]


class RolloutEngine(Engine, Protocol):
    async def push(self, weights: Mapping[str, Any], version: int, mode: PauseMode) -> None:
        """Serves `weights` (Hugging Face names to float tensors of any dtype) as `version` from now on. `keep`:
        in-flight responses continue under the new weights; `abort`: their calls end and resume (partial
        rollout)."""
        ...

    async def close(self) -> None: ...


class FolderWriter(Protocol):
    def __call__(self, weights: Mapping[str, Any], folder: Path) -> None:
        """Writes `weights` (as `RolloutEngine.push` takes them) as a complete Hugging Face folder (config and
        safetensors) that a server can load in place of the base checkpoint."""
        ...


class RolloutSite(Protocol):
    """The base checkpoint (an HF folder), the context every call must fit, the sampling seed, true on-policy mode,
    the CPU threads the engine may keep busy (`cpu_threads` 0: `threads()` is every core this process may run on), a
    working directory of the engine's own (logs, pushed weights) and its index among the run's engines.
    `vocab_size`: the tokenizer's ids; an engine never samples an id at or beyond it (the checkpoint's embedding
    may pad beyond the tokenizer), None: every embedding row is a token."""

    checkpoint_dir: str
    vocab_size: int | None
    max_len: int
    seed: int
    true_on_policy: bool
    cpu_threads: int
    work_dir: str
    index: int

    def threads(self) -> int: ...

    def folder_writer(self) -> FolderWriter:
        """The writer of pushed weights for this checkpoint's model (it may load the model: call it off the event
        loop)."""
        ...
