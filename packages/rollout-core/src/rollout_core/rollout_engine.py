"""RolloutEngine: an `Engine` as a rollout loop drives it, plus the two calls a loop needs besides generating: take
new weights (`push`) and shut down (`close`). Every `rollout.engine` kind builds one object that is both (the native
engine itself; the vLLM and SGLang adapters with the server they own), so a loop holds one engine, not a wrapper.

RolloutSite: what the run decides for the engine it builds."""

from __future__ import annotations

from collections.abc import Mapping
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


class RolloutSite(Protocol):
    """The base checkpoint (an HF folder), the context every call must fit, the sampling seed, true on-policy mode
    and the CPU threads the engine may keep busy (`cpu_threads` 0: `threads()` is every core this process may run
    on)."""

    checkpoint_dir: str
    max_len: int
    seed: int
    true_on_policy: bool
    cpu_threads: int

    def threads(self) -> int: ...
