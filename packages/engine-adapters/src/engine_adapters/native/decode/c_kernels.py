"""Builds and loads the C kernels in `engine_adapters/native/decode/csrc/` (decode attention, routed experts) at first
use, and the C++ library that implements their custom ops (`torch.ops.native_engine.*`) for the dispatcher.

Each kernel is compiled with the system C compiler (`$CC`, else `cc`; torch.compile's CPU backend needs one too)
with `-O3 -march=native` and reassociation (`FLAGS`) and its shape constants as `-D` defines, into a per-user cache
directory (`$NATIVE_ENGINE_KERNEL_DIR`, else `<tmp>/native_engine_kernels_<uid>`) under a name hashed from the
source, the compiler and the flags, so a changed source or shape builds anew and concurrent builders agree. A
missing compiler or a failed build raises with what was run and what it printed. The sources ship inside the
package (`importlib.resources`), so an installed wheel finds them as a source checkout does.

The ops' CPU implementations are C++ (`csrc/torch_ops.cpp`, built once per torch version with `$CXX`, else `c++`,
against torch's headers): they validate their tensors and call the kernel registered for their shape
(`register_kernel`). So an op call, from Python or from a compiled graph's C++ wrapper, never enters Python; a
Python implementation would cost a few microseconds per call, paid per layer of every decode step.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import threading
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import torch

# Not -ffast-math: linking a shared library with it sets flush-to-zero for the whole process (crtfastmath).
FLAGS = (
    "-O3",
    "-march=native",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fno-signed-zeros",
    "-fassociative-math",
    "-ffinite-math-only",
    "-pthread",
    "-fPIC",
    "-shared",
)
CXX_FLAGS = ("-O2", "-std=c++20", "-fPIC", "-shared")
_BUILD_LOCK = threading.Lock()
_LIBRARY = torch.library.Library("native_engine", "DEF")  # the kernels' custom ops: torch.ops.native_engine.*
SCHEMAS = {
    "decode_attention": "decode_attention(Tensor q, Tensor k_new, Tensor v_new, Tensor key_cache, Tensor value_cache, "
    "Tensor slot_ids, Tensor positions, float scale, int threads) -> Tensor",
    "moe_experts": "moe_experts(Tensor x, Tensor h, Tensor ids, Tensor weights, Tensor gate_up, Tensor down, "
    "int threads) -> Tensor",
}
for _schema in SCHEMAS.values():
    _LIBRARY.define(_schema)
ATTENTION, EXPERTS = 0, 1  # kernel kinds of `register_kernel`


def supports(dtype: torch.dtype, cache_dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the kernels serve a decode graph with these parameter and KV-cache dtypes on this device."""
    return dtype == torch.float32 and cache_dtype == torch.float32 and device.type == "cpu"


def _cache_dir() -> Path:
    root = os.environ.get("NATIVE_ENGINE_KERNEL_DIR") or os.path.join(
        tempfile.gettempdir(), f"native_engine_kernels_{os.getuid()}"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sources() -> dict[str, str]:
    """Every file of `csrc/` by name (a kernel's source and the headers it includes)."""
    folder = resources.files("engine_adapters.native.decode").joinpath("csrc")
    return {
        f.name: f.read_text() for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith((".c", ".h"))
    }


@functools.cache
def library(source_name: str, defines: tuple[tuple[str, int], ...]) -> ctypes.CDLL:
    """`csrc/<source_name>` compiled with `-D<name>=<value>` for each of `defines` (built once per sources,
    compiler, flags and defines; loaded once per process)."""
    sources = _sources()
    compiler = os.environ.get("CC", "cc")
    flags = (*FLAGS, *(f"-D{name}={value}" for name, value in defines))
    text = "\0".join((source_name, compiler, *flags, *(f"{k}\0{v}" for k, v in sources.items())))
    target = _cache_dir() / f"{Path(source_name).stem}_{hashlib.sha256(text.encode()).hexdigest()[:16]}.so"
    with _BUILD_LOCK:
        if not target.exists():
            _build(source_name, ("CC", compiler), [*flags, "{src}", "-o", "{out}", "-lm"], sources, target)
    return ctypes.CDLL(str(target))


def _build(name: str, compiler: tuple[str, str], args: list[str], sources: dict[str, str], target: Path) -> None:
    """Builds `target` from `sources[name]` atomically: the compiler (its environment variable and value) runs with
    `args` (`{src}` and `{out}` filled in) in a temporary folder holding `sources`, and the result is renamed into
    place, so concurrent builders never see a half-written library."""
    variable, program = compiler
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        for file, text in sources.items():
            (Path(tmp) / file).write_text(text)
        src, out = str(Path(tmp) / name), str(Path(tmp) / target.name)
        command = [program, *(arg.replace("{src}", src).replace("{out}", out) for arg in args)]
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError as e:
            language = "C++" if variable == "CXX" else "C"
            raise RuntimeError(
                f"{name}: {language} compiler not found: got {variable}={program!r}, expected a gcc- or "
                "clang-compatible compiler on PATH (torch.compile's CPU backend needs one too)"
            ) from e
        if done.returncode != 0:
            raise RuntimeError(f"{name}: `{' '.join(command)}` failed:\n{done.stderr}")
        os.replace(out, target)


@functools.cache
def _ops_library() -> Callable[[int, int, int, int | None], int]:
    """`csrc/torch_ops.cpp` built against this torch and loaded into the dispatcher (once per process): from then on
    `torch.ops.native_engine.*` run their C++ implementations."""
    folder = resources.files("engine_adapters.native.decode").joinpath("csrc")
    source = folder.joinpath("torch_ops.cpp").read_text()
    compiler = os.environ.get("CXX", "c++")
    root = Path(torch.__file__).parent
    flags = (
        *CXX_FLAGS,
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-I{root / 'include'}",
    )
    links = (f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu")
    text = "\0".join((compiler, *flags, *links, torch.__version__, source))
    target = _cache_dir() / f"torch_ops_{hashlib.sha256(text.encode()).hexdigest()[:16]}.so"
    with _BUILD_LOCK:
        if not target.exists():
            args = [*flags, "{src}", "-o", "{out}", *links]
            _build("torch_ops.cpp", ("CXX", compiler), args, {"torch_ops.cpp": source}, target)
    torch.ops.load_library(str(target))
    register = ctypes.CDLL(str(target)).native_engine_register_kernel
    register.restype = ctypes.c_int64
    register.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return register


@functools.cache
def register_kernel(kind: int, source_name: str, defines: tuple[tuple[str, int], ...], symbol: str) -> None:
    """Builds `symbol` of `library(source_name, defines)` and registers it for the ops under its shape key (the two
    define values, in order; see `csrc/torch_ops.cpp`). Idempotent (cached per arguments)."""
    entry = ctypes.cast(getattr(library(source_name, defines), symbol), ctypes.c_void_p).value
    (a, b) = (value for _, value in defines)
    if _ops_library()(kind, a, b, entry) != 0:
        raise ValueError(f"register_kernel: got kind {kind}, expected {ATTENTION} or {EXPERTS}")
