"""Builds and loads the C kernels in `native_engine/decode/csrc/` (decode attention, routed experts) at first use.

Each kernel is compiled with the system C compiler (`$CC`, else `cc`; torch.compile's CPU backend needs one too)
with `-O3 -march=native` and reassociation (`FLAGS`) and its shape constants as `-D` defines, into a per-user cache
directory (`$NATIVE_ENGINE_KERNEL_DIR`, else `<tmp>/native_engine_kernels_<uid>`) under a name hashed from the
source, the compiler and the flags, so a changed source or shape builds anew and concurrent builders agree. A
missing compiler or a failed build raises with what was run and what it printed. The sources ship inside the
package (`importlib.resources`), so an installed wheel finds them as a source checkout does.
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
_BUILD_LOCK = threading.Lock()
_FUNCTIONS: dict[tuple, Callable] = {}
_LIBRARY = torch.library.Library("native_engine", "DEF")  # the kernels' custom ops: torch.ops.native_engine.*
ptr = ctypes.c_void_p


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
    folder = resources.files("native_engine.decode").joinpath("csrc")
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
            _compile(compiler, flags, source_name, sources, target)
    return ctypes.CDLL(str(target))


def _compile(compiler: str, flags: tuple[str, ...], name: str, sources: dict[str, str], target: Path) -> None:
    """Builds `target` from `sources[name]` atomically (a temporary file renamed into place)."""
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        for file, text in sources.items():
            (Path(tmp) / file).write_text(text)
        src, out = Path(tmp) / name, Path(tmp) / target.name
        command = [compiler, *flags, str(src), "-o", str(out), "-lm"]
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise RuntimeError(
                f"{name}: C compiler not found: got CC={compiler!r}, expected a gcc- or clang-compatible compiler "
                "on PATH (torch.compile's CPU backend needs one too)"
            ) from e
        if done.returncode != 0:
            raise RuntimeError(f"{name}: `{' '.join(command)}` failed:\n{done.stderr}")
        os.replace(out, target)


def function(source_name: str, defines: tuple[tuple[str, int], ...], symbol: str, argtypes: list[type]) -> Callable:
    """The kernel entry point `symbol` of `library(source_name, defines)`, returning int64, with `argtypes`
    (cached: looking it up is on every kernel call's path)."""
    key = (source_name, defines, symbol)
    found = _FUNCTIONS.get(key)
    if found is None:
        found = getattr(library(source_name, defines), symbol)
        found.restype = ctypes.c_int64
        found.argtypes = argtypes
        _FUNCTIONS[key] = found
    return found


def define_op(schema: str, impl: Callable, fake: Callable) -> None:
    """Registers `native_engine::<schema>` with a CPU implementation and a fake one for tracing. A plain
    `torch.library.Library` registration: its dispatch costs a fraction of `torch.library.custom_op`'s per call,
    which counts for ops called once per layer per decode step."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    _LIBRARY.impl(name, impl, "CPU")
    torch.library.register_fake(f"native_engine::{name}", fake, lib=_LIBRARY)


def check_tensors(op: str, specs: tuple[tuple[str, torch.Tensor, torch.dtype, int], ...]) -> None:
    """Raises unless each (name, tensor, dtype, dims) is a contiguous `dims`-d CPU tensor of `dtype` (what a kernel
    reads through a pointer)."""
    for name, t, dtype, dims in specs:
        if t.dtype != dtype or t.dim() != dims or not t.is_contiguous() or not t.is_cpu:
            raise ValueError(
                f"{op}: {name} got {t.dtype} {tuple(t.shape)} contiguous={t.is_contiguous()} on {t.device}, "
                f"expected a contiguous {dims}-d {dtype} CPU tensor"
            )


def check_threads(op: str, threads: int) -> None:
    if threads < 1:
        raise ValueError(f"{op}: threads got {threads}, expected >= 1")
