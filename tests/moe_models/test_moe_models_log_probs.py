"""token_log_probs is the trainer's per-token log-prob: log softmax(logits / T) at the next token, where that token
is real (0 where it is padding)."""

from __future__ import annotations

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM

CONFIG = MoEConfig.preset("tiny", vocab_size=37, num_hidden_layers=2)


def _by_hand(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    out = torch.empty(ids.shape[0], ids.shape[1] - 1)
    for b in range(ids.shape[0]):
        for t in range(ids.shape[1] - 1):
            row = torch.log_softmax(logits[b, t].double() / temperature, dim=-1)
            out[b, t] = row[ids[b, t + 1]].float()
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.9])
def test_token_log_probs_equal_log_softmax_gathered_by_hand(temperature: float) -> None:
    torch.manual_seed(0)
    model = MoEForCausalLM(CONFIG).eval()
    ids = torch.randint(0, 37, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.no_grad():
        logits = model(ids, mask).logits
        got, routed = model.token_log_probs(ids, mask, temperature=temperature, capture_routing=True)
    assert got.dtype == torch.float32
    assert got.shape == (2, 6)
    assert routed is not None and routed.shape == (2, 7, CONFIG.num_moe_layers, 2)
    scored = (mask[:, :-1] * mask[:, 1:]).bool()
    assert torch.allclose(got[scored], _by_hand(logits, ids, temperature)[scored], atol=1e-5)
    assert (got[~scored] == 0).all()


def test_temperature_changes_log_probs() -> None:
    torch.manual_seed(0)
    model = MoEForCausalLM(CONFIG).eval()
    ids = torch.randint(0, 37, (1, 6))
    with torch.no_grad():
        cold, _ = model.token_log_probs(ids, None, temperature=0.5)
        warm, _ = model.token_log_probs(ids, None, temperature=1.0)
    assert (cold - warm).abs().max().item() > 1e-4


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_is_rejected(temperature: float) -> None:
    model = MoEForCausalLM(CONFIG)
    with pytest.raises(ValueError, match="temperature"):
        model.token_log_probs(torch.zeros(1, 3, dtype=torch.int64), None, temperature=temperature)


def test_all_padding_row_keeps_logits_finite_and_other_rows_unchanged() -> None:
    torch.manual_seed(0)
    model = MoEForCausalLM(CONFIG).eval()
    ids = torch.randint(0, 37, (2, 5))
    mask = torch.ones_like(ids)
    mask[1] = 0
    with torch.no_grad():
        padded = model(ids, mask).logits
        alone = model(ids[:1]).logits
    assert torch.isfinite(padded).all()
    assert torch.allclose(padded[0], alone[0], atol=1e-6)


def test_model_without_moe_layers_captures_empty_routing() -> None:
    config = CONFIG.replace(mlp_only_layers=(0, 1))
    model = MoEForCausalLM(config).eval()
    with torch.no_grad():
        out = model(torch.zeros(2, 3, dtype=torch.int64), capture_routing=True)
    assert config.num_moe_layers == 0
    assert out.routed_experts is not None and out.routed_experts.shape == (2, 3, 0, 2)


def test_entropy_on_the_grid_is_filled_by_the_backward_and_equals_the_whole_logits_entropy() -> None:
    """The trainer reads `TokenScores.entropy` after `backward()`: the grid it holds is the buffer the backward
    fills (a copy taken at forward time stayed zero), and equals the entropy of the whole logits by hand."""
    from moe_models.log_probs import next_token_entropy

    torch.manual_seed(0)
    model = MoEForCausalLM(CONFIG)
    ids = torch.randint(0, 37, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.no_grad():
        want = next_token_entropy(model(ids, mask).logits, temperature=0.7)
    scores = model.token_log_probs_at(ids, mask, None, temperature=0.7, with_entropy=True)
    assert scores.entropy is not None and not scores.entropy.any()  # nothing until the backward
    scores.log_probs.sum().backward()
    scored = (mask[:, :-1] * mask[:, 1:]).bool()
    torch.testing.assert_close(scores.entropy[scored], want[scored], rtol=1e-5, atol=1e-5)
    assert (scores.entropy[~scored] == 0).all() and (scores.entropy[scored] > 0).all()
