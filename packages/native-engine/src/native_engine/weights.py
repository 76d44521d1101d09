"""WeightSource: reading a weight push (a numpy state dict, a safetensors file or an HF-format directory)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file as load_torch_file

WeightSource = dict[str, np.ndarray] | str | os.PathLike[str]


def load_file(path: Path) -> dict[str, np.ndarray]:
    """One safetensors file as numpy arrays; bfloat16/float16 tensors are widened to float32 (numpy has no bf16)."""
    tensors = load_torch_file(str(path))
    return {
        k: (t.float() if t.is_floating_point() and t.dtype != torch.float64 else t).numpy() for k, t in tensors.items()
    }


def read_state(source: WeightSource) -> dict[str, np.ndarray]:
    """The state dict a push carries, keyed by Hugging Face parameter names.

    A directory must hold `*.safetensors` files (all are read: sharded checkpoints work); a path may also name one
    `.safetensors` file. Anything else is a ValueError saying what was found.
    """
    if isinstance(source, dict):
        bad = [k for k, v in source.items() if not isinstance(v, np.ndarray)]
        if bad:
            raise ValueError(f"weight state: expected numpy arrays, got {type(source[bad[0]]).__name__} for {bad[0]!r}")
        return source
    if not isinstance(source, str | os.PathLike):
        raise ValueError(f"weight source: expected a dict of numpy arrays or a path, got {type(source).__name__}")
    path = Path(source)
    if path.is_file() and path.suffix == ".safetensors":
        return load_file(path)
    if not path.is_dir():
        raise ValueError(f"weight source {str(path)!r}: expected a directory or a .safetensors file, got neither")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        found = sorted(p.name for p in path.iterdir())[:10]
        raise ValueError(f"weight source {str(path)!r}: expected *.safetensors files, found {found}")
    state: dict[str, np.ndarray] = {}
    for file in files:
        state.update(load_file(file))
    return state
