"""Test helpers other packages reuse: a tiny seeded MoE engine and its `EngineHarness` for the contract suite."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import torch
from moe_models import MoEConfig, MoEForCausalLM, state_dict_numpy
from rollout_core.testing.engine_contract import EngineHarness

from engine_adapters.native.engine import NativeEngine


def tiny_model(
    seed: int = 0, vocab_size: int = 128, eos_token_id: int | None = 1, **overrides: object
) -> MoEForCausalLM:
    """The `tiny` preset with weights drawn from `seed` (fp32, eval mode)."""
    torch.manual_seed(seed)
    config = MoEConfig.preset("tiny", vocab_size=vocab_size, eos_token_id=eos_token_id, **overrides)
    return MoEForCausalLM(config).eval()


def padding_rows_win(model: MoEForCausalLM, tokenizer_size: int, logit: float = 30.0) -> MoEForCausalLM:
    """Makes the head's padding rows (ids at or beyond `tokenizer_size`) by far the likeliest ids at every position
    of a freshly initialised model, in place: every embedding gets +8 in its dimension 0, which stays positive
    through the small residual updates of the layers, and every padding row reads that dimension times `logit`
    (real rows give logits ~0.2). A test that samples only the tokenizer's ids must hide them."""
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] += 8.0
        model.lm_head.weight[tokenizer_size:] = 0.0
        model.lm_head.weight[tokenizer_size:, 0] = logit
    return model


def perturbed_state(model: MoEForCausalLM, seed: int, scale: float = 0.05) -> dict[str, np.ndarray]:
    """The model's state dict with Gaussian noise added to every floating tensor (different weights to push)."""
    rng = np.random.default_rng(seed)
    state = state_dict_numpy(model)
    return {
        k: v + rng.normal(0.0, scale, v.shape).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in state.items()
    }


def make_native_harness(
    *, seed: int = 0, slots: int = 16, max_len: int = 256, pause_mode: str = "abort", **knobs: object
) -> EngineHarness:
    """A fresh tiny engine; its `update_weights` does pause(pause_mode) -> push perturbed weights -> resume."""
    model = tiny_model(seed)
    engine = NativeEngine(model, slots=slots, max_len=max_len, **knobs)

    async def update_weights() -> None:
        await engine.pause(pause_mode)  # type: ignore[arg-type]
        version = engine.weight_version + 1
        await engine.update_weights(perturbed_state(engine.model, seed=version), version)
        await engine.resume()

    return EngineHarness(
        engine=engine,
        vocab_size=engine.vocab_size,
        max_context=engine.max_context,
        update_weights=update_weights,
        close=engine.close,
    )


async def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    """Polls `condition` every 2 ms on the running loop; TimeoutError (saying `what`) after `timeout` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"wait_until: expected {what} within {timeout} s, got none")
        await asyncio.sleep(0.002)
