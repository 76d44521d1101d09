"""HFFolderWriter: pushed weights as a Hugging Face folder, for engines that reload weights from files (vLLM,
SGLang). It keeps one model of the checkpoint's config, so each push is a copy into existing tensors and a save;
weights in either key layout (fused or per-expert) are accepted, and the folder is always in the disk layout."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from moe_models.checkpoint import load_pretrained, load_state_dict_tensors, save_pretrained
from moe_models.model import MoEForCausalLM


class HFFolderWriter:
    """A `rollout_core.FolderWriter` for this package's model family."""

    def __init__(self, model: MoEForCausalLM) -> None:
        self._model = model

    @classmethod
    def load(cls, checkpoint_dir: str | Path) -> HFFolderWriter:
        """Loads the base checkpoint once (the written folders keep its config and dtype)."""
        return cls(load_pretrained(checkpoint_dir))

    def __call__(self, weights: Mapping[str, torch.Tensor], folder: Path) -> None:
        load_state_dict_tensors(self._model, dict(weights))
        save_pretrained(self._model, folder)
