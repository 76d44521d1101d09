"""Runs every moe_models test with one torch intra-op thread, restoring the previous count afterwards.

On a shared 2-core machine, two OpenMP threads on these tiny matmuls starve at barriers (a [64,128]x[128,128] mm
measured 920 us at 2 threads vs 39 us at 1), which made this suite ~3x slower under load.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
