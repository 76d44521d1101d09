"""Every place Megatron-Core 0.19.2 assumes CUDA on the path this project uses, and what runs instead on a CPU.
`tests/trainers/test_trainers_megatron_compat.py` pins each one: it fails when Megatron stops needing the
workaround (so it can go) and when the workaround stops working. Nothing is patched outside this module.

1. Device lookups: the RoPE module moves `inv_freq` to `torch.cuda.current_device()` on its first forward, and
   the attention and memory-buffer code allocate on it; without a driver that call raises. Without CUDA,
   `torch.cuda.current_device` is made to answer `"cpu"` (process-wide, installed by `install()`; with CUDA
   nothing is changed).
2. The RNG tracker: attention runs inside `get_cuda_rng_tracker().fork()`, which needs a tracked CUDA generator
   (`model_parallel_cuda_manual_seed` needs a driver). Dropout is off in every config built here, so on a CPU
   the tracker is one whose `fork` leaves the RNG alone (`CpuRngTracker`); `check_no_dropout` refuses a config
   that would draw random numbers inside it.
3. Not patches, choices: the causal mask is passed explicitly (the default one is built with `device="cuda"`,
   `megatron.core.transformer.utils.get_default_causal_mask`), tokens are dispatched by `allgather` (the
   `alltoall` dispatcher creates a `torch.cuda.Stream`), and every fusion (RoPE, bias-activation, softmax,
   gradient accumulation) is off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

_installed = False
ORIGINAL_CURRENT_DEVICE = torch.cuda.current_device  # before workaround 1 (its test restores it)


def cpu_current_device() -> str:
    return "cpu"


def check_no_dropout(config: object) -> None:
    """Workaround 2 holds only without dropout: refuse a config with any."""
    rates = {k: getattr(config, k) for k in ("hidden_dropout", "attention_dropout")}
    if any(rates.values()):
        raise ValueError(f"megatron on CPU: expected hidden_dropout = attention_dropout = 0, got {rates}")


def install() -> None:
    """Applies workarounds 1 and 2 in this process when torch sees no CUDA device; idempotent."""
    global _installed
    if _installed or torch.cuda.is_available():
        return
    from megatron.core.tensor_parallel import random as mrandom

    class CpuRngTracker(mrandom.CudaRNGStatesTracker):
        """A tracker whose `fork` does not touch any generator (no dropout runs inside it here)."""

        @contextlib.contextmanager
        def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
            yield

    torch.cuda.current_device = cpu_current_device  # type: ignore[assignment]
    mrandom._CUDA_RNG_STATE_TRACKER = CpuRngTracker()
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
    _installed = True
