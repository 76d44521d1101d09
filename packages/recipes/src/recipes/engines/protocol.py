"""RolloutEngine: an inference engine as a rollout producer uses it: generate (the `rollout_core.Engine` in
`engine`), take new weights while in-flight calls freeze (`keep`) or end (`abort`), close."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

import torch
from rollout_core import Engine

PauseMode = Literal["keep", "abort"]


class RolloutEngine(Protocol):
    engine: Engine

    async def push(self, weights: Mapping[str, torch.Tensor], version: int, mode: PauseMode) -> None:
        """Serves `weights` (Hugging Face names, any float dtype) as `version` from now on. `keep`: in-flight
        responses continue under the new weights; `abort`: their calls end and resume (partial rollout)."""
        ...

    async def close(self) -> None: ...
