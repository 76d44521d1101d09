"""EngineSite: what a run decides for each engine it builds (a `rollout_core.RolloutSite`). Standard library only
at import (`--help` imports it); the folder writer loads the model when asked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rollout_core.native_engine_config import usable_cores

if TYPE_CHECKING:
    from rollout_core import FolderWriter


@dataclass(frozen=True)
class EngineSite:
    """Where and what an engine serves: the base checkpoint (an HF folder), the context every call must fit
    (longest prompt + response budget), its sampling seed, a working directory of its own (logs, pushed weights)
    and its index among the run's engines (rollouter id); `true_on_policy`: `numerics.true_on_policy`;
    `cpu_threads`: the CPU threads the engine may keep busy (an async rollouter's `ray.rollouter_threads`; 0: every
    core this process may run on, as in apps/sync_ppo, whose generation and training take turns); `vocab_size`: the
    tokenizer's ids, the only ones the engine samples (None: every embedding row)."""

    checkpoint_dir: str
    max_len: int
    seed: int
    work_dir: str
    index: int = 0
    true_on_policy: bool = False  # numerics.true_on_policy: sample with the invariant forward (native only)
    cpu_threads: int = 0
    vocab_size: int | None = None

    def threads(self) -> int:
        """`cpu_threads`, or (0) the number of cores this process may run on."""
        return self.cpu_threads or usable_cores()

    def folder_writer(self) -> FolderWriter:
        """Pushed weights as an HF folder of this project's model family (loads the base checkpoint)."""
        from moe_models.folder_writer import HFFolderWriter

        return HFFolderWriter.load(self.checkpoint_dir)
