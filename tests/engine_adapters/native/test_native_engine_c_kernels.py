"""The C-kernel builder (`engine_adapters.native.decode.c_kernels`): which dtypes the kernels serve, a clear error
without a compiler, and the sources found in the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from engine_adapters.native.decode import c_kernels


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


def test_a_missing_cpp_compiler_is_named_in_the_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    monkeypatch.setenv("NATIVE_ENGINE_KERNEL_DIR", str(tmp_path))
    c_kernels._ops_library.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="C\\+\\+ compiler not found: got CXX='no-such-compiler-here'"):
            c_kernels._ops_library()
    finally:
        c_kernels._ops_library.cache_clear()


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


@pytest.mark.parametrize(("op", "build"), [("decode_attention", (32, 2)), ("moe_experts", (128, 96))])
def test_the_ops_cpu_implementations_are_the_cpp_library(op: str, build: tuple[int, int]) -> None:
    """A compiled graph calls the ops through the dispatcher: their CPU kernels must be C++ (no Python per call)."""
    from engine_adapters.native.decode import attention_kernel, expert_kernel

    (attention_kernel if op == "decode_attention" else expert_kernel).build(*build)
    cpu = [line for line in torch._C._dispatch_dump(f"native_engine::{op}").splitlines() if line.startswith("CPU:")]
    assert len(cpu) == 1 and "torch_ops.cpp" in cpu[0], cpu


def test_the_op_library_ships_inside_the_decode_package() -> None:
    from importlib import resources

    source = resources.files("engine_adapters.native.decode").joinpath("csrc", "torch_ops.cpp").read_text()
    assert "TORCH_LIBRARY_IMPL(native_engine, CPU" in source
