"""BackendState: a training backend's checkpoint as named tensors plus JSON metadata (safetensors + JSON)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

TENSORS_FILE = "backend.safetensors"
META_FILE = "backend.json"
FORMAT_VERSION = 1


def _fsync(path: Path) -> None:
    """Flushes a file's or a folder's data and metadata to the disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class BackendState:
    """`tensors`: model weights under `model.<name>`, optimiser moments under `optim.<index>.<key>`, the torch
    RNG under `rng.torch`. `version`: weight version (number of updates applied). `optimizer_groups`: AdamW
    hyper-parameters per param group (JSON-able, no tensors). `optimizer_param_names`: the parameter name of
    each optimiser index, so a state never loads into a model whose parameters were reordered."""

    tensors: dict[str, torch.Tensor]
    version: int
    optimizer_groups: list[dict[str, float | int | bool | list[float] | list[int] | None]] = field(default_factory=list)
    optimizer_param_names: list[str] = field(default_factory=list)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Writes `backend.safetensors` then `backend.json` into `directory` (created if missing) and fsyncs both
        and the folder before returning, in the writing process (on a shared file system the process that commits
        the checkpoint may be another). A failed write (e.g. `OSError` ENOSPC: the disk is full) raises and leaves
        a partial folder: the caller stages into a folder that is never loaded until it is marked complete."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.tensors.items()}
        try:
            save_file(tensors, str(out / TENSORS_FILE))
        except SafetensorError as exc:  # its I/O errors (a full disk) are not OSErrors: give callers one
            code = re.search(r"os error (\d+)", str(exc))
            raise OSError(
                int(code.group(1)) if code else None, f"BackendState.save: writing {out / TENSORS_FILE} failed: {exc}"
            ) from exc
        meta = {
            "format": FORMAT_VERSION,
            "version": self.version,
            "optimizer_groups": self.optimizer_groups,
            "optimizer_param_names": self.optimizer_param_names,
        }
        (out / META_FILE).write_text(json.dumps(meta, indent=1) + "\n")
        for path in (out / TENSORS_FILE, out / META_FILE, out):
            _fsync(path)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> BackendState:
        src = Path(directory)
        for name in (TENSORS_FILE, META_FILE):
            if not (src / name).is_file():
                raise ValueError(f"BackendState.load: expected {src / name}, got no such file")
        meta = json.loads((src / META_FILE).read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"BackendState.load: expected format {FORMAT_VERSION}, got {meta.get('format')!r}")
        return cls(
            tensors=load_file(str(src / TENSORS_FILE)),
            version=int(meta["version"]),
            optimizer_groups=list(meta["optimizer_groups"]),
            optimizer_param_names=[str(n) for n in meta["optimizer_param_names"]],
        )
