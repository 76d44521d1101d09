"""The rollout-engine seam every `rollout.engine` kind builds: `RolloutEngine` is `native_engine.rollout_protocol`'s
(where the native engine's config names it without an import circle); the vLLM and SGLang engines here implement
it. `PauseMode`: how a push treats in-flight calls."""

from typing import Literal

from native_engine.rollout_protocol import RolloutEngine

PauseMode = Literal["keep", "abort"]

__all__ = ["PauseMode", "RolloutEngine"]
