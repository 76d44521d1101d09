"""BackendState.save makes its files durable in the writing process, and a full disk is an OSError naming the file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from trainers.backend import BackendState
from trainers.backend import state as state_module

STATE = BackendState({"model.w": torch.arange(6.0).reshape(2, 3), "optim.0.step": torch.tensor(3.0)}, version=3)


def test_save_fsyncs_both_files_and_the_folder_and_loads_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    STATE.save(tmp_path / "ckpt")
    out = tmp_path / "ckpt"
    assert synced == [str(out / "backend.safetensors"), str(out / "backend.json"), str(out)]
    loaded = BackendState.load(out)
    assert loaded.version == 3 and torch.equal(loaded.tensors["model.w"], STATE.tensors["model.w"])


def test_a_full_disk_while_writing_the_tensors_is_an_oserror_with_its_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(tensors: dict[str, torch.Tensor], path: str) -> None:
        Path(path).write_bytes(b"\0" * 10)  # the part that fitted
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(state_module, "save_file", full)
    with pytest.raises(OSError, match=r"BackendState.save: writing .*backend.safetensors failed.*No space") as e:
        STATE.save(tmp_path / "ckpt")
    assert e.value.errno == errno.ENOSPC
    assert not (tmp_path / "ckpt" / "backend.json").exists()  # nothing written after the failure
