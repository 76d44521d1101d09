"""The C-kernel builder (`native_engine.decode.c_kernels`): which dtypes the kernels serve, a clear error without a
compiler, and the sources found in the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from native_engine.decode import c_kernels


def test_kernels_serve_only_fp32_on_the_cpu() -> None:
    cpu = torch.device("cpu")
    assert c_kernels.supports(torch.float32, torch.float32, cpu)
    assert not c_kernels.supports(torch.float32, torch.bfloat16, cpu)
    assert not c_kernels.supports(torch.bfloat16, torch.float32, cpu)
    assert not c_kernels.supports(torch.float32, torch.float32, torch.device("meta"))


def test_a_missing_compiler_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CC", "no-such-compiler-here")
    monkeypatch.setenv("NATIVE_ENGINE_KERNEL_DIR", str(tmp_path))
    c_kernels.library.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="C compiler not found: got CC='no-such-compiler-here'"):
            c_kernels.library("moe_experts.c", (("HIDDEN", 8), ("INTER", 4)))
    finally:
        c_kernels.library.cache_clear()


def test_a_failing_build_shows_the_command_and_its_output(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NATIVE_ENGINE_KERNEL_DIR", str(tmp_path))
    c_kernels.library.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"(?s)decode_attention\.c: `.*-DHEAD_DIM=32.*` failed:.*GROUP"):
            c_kernels.library("decode_attention.c", (("HEAD_DIM", 32),))  # GROUP undefined
    finally:
        c_kernels.library.cache_clear()


def test_loading_the_kernels_keeps_subnormal_floats_in_this_process() -> None:
    import numpy as np

    c_kernels.library("decode_attention.c", (("HEAD_DIM", 32), ("GROUP", 2)))
    c_kernels.library("moe_experts.c", (("HIDDEN", 128), ("INTER", 96)))
    tiny = np.float32(1e-39)  # subnormal: flush-to-zero (what -ffast-math links in) would make it 0
    assert tiny * np.float32(1.0) != 0
    assert (torch.tensor([1e-39]) * 1.0).item() != 0


def test_the_kernel_sources_ship_inside_the_decode_package() -> None:
    sources = c_kernels._sources()
    assert sorted(sources) == ["decode_attention.c", "fast_exp.h", "moe_experts.c", "work_pool.h"]
    assert all("#include" in text for name, text in sources.items() if name.endswith(".c"))
