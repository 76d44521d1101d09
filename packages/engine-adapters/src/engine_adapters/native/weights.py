"""WeightSource: reading a weight push (a state dict of numpy arrays or torch tensors, a safetensors file or an
HF-format directory)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

WeightSource = Mapping[str, np.ndarray] | Mapping[str, torch.Tensor] | str | os.PathLike[str]


def _as_tensor(name: str, value: object) -> torch.Tensor:
    """A state-dict entry as a torch tensor in its own dtype and device (cast to the parameter's when loaded).
    Read-only numpy arrays (e.g. zero-copy from Ray's object store) are copied once: torch needs writable memory."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.require(value, requirements="W"))
    if isinstance(value, torch.Tensor):
        if not value.is_floating_point():
            raise ValueError(f"weight state: expected floating tensors, got {value.dtype} for {name!r}")
        return value.detach()
    raise ValueError(f"weight state: expected numpy arrays or torch tensors, got {type(value).__name__} for {name!r}")


def read_state(source: WeightSource) -> dict[str, torch.Tensor]:
    """The state dict a push carries, keyed by Hugging Face parameter names, as tensors in their own dtypes (the
    model casts each to its parameter's dtype when loading: a bfloat16 push into fp32 parameters is widened).

    A mapping may hold numpy arrays or floating torch tensors of any dtype (bfloat16 included). A directory must
    hold `*.safetensors` files (all are read: sharded checkpoints work); a path may also name one `.safetensors`
    file. Anything else is a ValueError saying what was found.
    """
    if isinstance(source, Mapping):
        return {name: _as_tensor(name, value) for name, value in source.items()}
    if not isinstance(source, str | os.PathLike):
        raise ValueError(f"weight source: expected a mapping of arrays/tensors or a path, got {type(source).__name__}")
    path = Path(source)
    if path.is_file() and path.suffix == ".safetensors":
        return load_file(str(path))
    if not path.is_dir():
        raise ValueError(f"weight source {str(path)!r}: expected a directory or a .safetensors file, got neither")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        found = sorted(p.name for p in path.iterdir())[:10]
        raise ValueError(f"weight source {str(path)!r}: expected *.safetensors files, found {found}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state
