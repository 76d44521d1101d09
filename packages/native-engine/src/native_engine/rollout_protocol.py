"""RolloutEngine: an inference engine as a rollout producer uses it: generate (the `rollout_core.Engine` in
`engine`), take new weights while in-flight calls freeze (`keep`) or end (`abort`), close. And RolloutSite: what
the run decides for the engine it builds. Every `rollout.engine` kind's `build(site)` gives one (the native one
here, vLLM's and SGLang's in `recipes.engines`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

import torch
from rollout_core import Engine


class RolloutEngine(Protocol):
    engine: Engine

    async def push(self, weights: Mapping[str, torch.Tensor], version: int, mode: Literal["keep", "abort"]) -> None:
        """Serves `weights` (Hugging Face names, any float dtype) as `version` from now on. `keep`: in-flight
        responses continue under the new weights; `abort`: their calls end and resume (partial rollout)."""
        ...

    async def close(self) -> None: ...


class RolloutSite(Protocol):
    """What the run decides for an engine (`recipes.engine_config.EngineSite`): the base checkpoint, the context
    every call must fit, the sampling seed, true on-policy mode and the CPU threads the engine may keep busy
    (`cpu_threads` 0: `threads()` is every core this process may run on)."""

    checkpoint_dir: str
    max_len: int
    seed: int
    true_on_policy: bool
    cpu_threads: int

    def threads(self) -> int: ...
