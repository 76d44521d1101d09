"""Each CPU workaround of `trainers.backend.megatron.compat`, pinned both ways: Megatron-Core 0.19.2 still needs it
(the test fails once it does not, so the workaround can go) and it still works. Needs the `megatron` group."""

from __future__ import annotations

from importlib.util import find_spec

import pytest
import torch

pytestmark = [
    pytest.mark.megatron,
    pytest.mark.skipif(
        find_spec("megatron") is None, reason="no Megatron-Core here: run bash scripts/test_megatron.sh"
    ),
    pytest.mark.skipif(torch.cuda.is_available(), reason="the workarounds are for a machine without CUDA"),
]


def test_rope_asks_cuda_for_its_device_and_the_cpu_answer_lets_it_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from trainers.backend.megatron import compat

    rope = RotaryEmbedding(kv_channels=8, rotary_percent=1.0, use_cpu_initialization=True)
    monkeypatch.setattr(torch.cuda, "current_device", compat.ORIGINAL_CURRENT_DEVICE)
    with pytest.raises(RuntimeError, match=r"NVIDIA driver|CUDA"):
        rope(4)
    monkeypatch.setattr(torch.cuda, "current_device", compat.cpu_current_device)
    assert tuple(rope(4).shape) == (4, 1, 1, 8)


def test_megatrons_rng_seeding_needs_cuda_and_the_cpu_tracker_forks_without_touching_the_rng() -> None:
    from megatron.core.tensor_parallel import random as mrandom
    from trainers.backend.megatron import compat

    with pytest.raises((RuntimeError, AssertionError)):
        mrandom.CudaRNGStatesTracker().add("model-parallel-rng", 1234)  # what model_parallel_cuda_manual_seed does
    compat.install()
    tracker = mrandom.get_cuda_rng_tracker()
    before = torch.get_rng_state()
    with tracker.fork():
        pass
    assert torch.equal(before, torch.get_rng_state())


def test_the_default_causal_mask_is_built_on_cuda_so_ours_is_passed_explicitly() -> None:
    from megatron.core.transformer.utils import get_default_causal_mask
    from trainers.backend.megatron.gpt import causal_padding_mask

    with pytest.raises(RuntimeError, match=r"NVIDIA driver|CUDA"):
        get_default_causal_mask(4)
    mask = causal_padding_mask(torch.tensor([[1, 1, 0]]), 1, 3)
    expected = torch.tensor([[False, True, True], [False, False, True], [False, False, False]])
    assert torch.equal(mask[0, 0], expected)  # the padding query sees the real keys and itself


def test_dropout_is_refused_because_the_cpu_tracker_would_not_fork_its_rng() -> None:
    from types import SimpleNamespace

    from trainers.backend.megatron.compat import check_no_dropout

    with pytest.raises(ValueError, match="hidden_dropout = attention_dropout = 0"):
        check_no_dropout(SimpleNamespace(hidden_dropout=0.1, attention_dropout=0.0))
