"""Rows that start alike (a GRPO group's samples of one prompt) compute their shared prefix once
(`shared_prefix=`): every row's log-probs and the gradients equal the forward that computes each row in full, to
float rounding, for every family (sliding windows, sinks and MLA included) and on both attention grids (rows, or one
segment per group); rows whose prefix tokens or replayed routing differ are not shared."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM, RouterReplay, length_blocks
from moe_models.segment_grid import SegmentGrid
from moe_models.shared_prefix import prefix_owners
from moe_models.token_layout import TokenLayout

FAMILIES = ("qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "gpt_oss")
VOCAB = 40


def _group_batch(groups: int, samples: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids [B, T], attention_mask [B, T], prompt_lengths [B]): each group's samples share a prompt."""
    gen = torch.Generator().manual_seed(seed)
    rows, prompts = [], []
    for _ in range(groups):
        prompt = torch.randint(1, VOCAB, (int(torch.randint(2, 7, (1,), generator=gen)),), generator=gen)
        for _ in range(samples):
            response = torch.randint(1, VOCAB, (int(torch.randint(1, 6, (1,), generator=gen)),), generator=gen)
            rows.append(torch.cat([prompt, response]))
            prompts.append(len(prompt))
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return ids, mask, torch.tensor(prompts)


def _model(family: str = "qwen3_moe") -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=VOCAB, model_type=family))


def _response_cells(mask: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
    """[B, T-1] bool: the shifted entries that score a response token."""
    cols = torch.arange(mask.shape[1] - 1)
    return (cols[None, :] >= prompts[:, None] - 1) & (cols[None, :] < mask.sum(1, keepdim=True) - 1)


def _log_probs_and_grads(
    model: MoEForCausalLM, ids: torch.Tensor, mask: torch.Tensor, prompts: torch.Tensor, share: bool, replay=None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    lp = model.token_log_probs_at(
        ids, mask, None, replay=replay, logits_from=prompts - 1, shared_prefix=prompts if share else None
    ).log_probs
    picked = lp[_response_cells(mask, prompts)]
    (picked * torch.linspace(0.5, 1.5, picked.numel())).sum().backward()
    return picked.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _assert_same(model: MoEForCausalLM, ids, mask, prompts, replay=None) -> None:
    full, full_grads = _log_probs_and_grads(model, ids, mask, prompts, False, replay)
    shared, shared_grads = _log_probs_and_grads(model, ids, mask, prompts, True, replay)
    torch.testing.assert_close(shared, full, rtol=0, atol=2e-6)
    assert len(shared_grads) == len(full_grads)
    for a, b in zip(shared_grads, full_grads, strict=True):  # summed in another order: fp32 noise of the largest
        assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max()) + 1e-8


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("row_cost", [-(10**9), 10**9], ids=["row-grid", "segment-grid"])
def test_a_shared_prefix_gives_every_row_its_full_forward(
    family: str, row_cost: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(length_blocks, "ROW_COST_PAIRS", row_cost)  # forces one grid: fewer or more rows
    model = _model(family)
    ids, mask, prompts = _group_batch(groups=3, samples=3, seed=1)
    with torch.no_grad():
        routed = model(ids, mask, capture_routing=True).routed_experts
    replay = RouterReplay(routed.to(torch.int16), mask.bool())
    _assert_same(model, ids, mask, prompts)
    _assert_same(model, ids, mask, prompts, replay)


def test_the_grid_choice_follows_its_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    ids, mask, prompts = _group_batch(groups=2, samples=4, seed=2)
    owners = prefix_owners(ids, prompts)
    layout = TokenLayout.of(ids, mask, owners=owners, shared=prompts)
    # 2 segments of 16 slots vs 8 rows of 10: the segments have fewer pairs, the rows more fixed costs
    for cost, segments in ((-(10**9), 8), (0, 2), (10**9, 2)):
        monkeypatch.setattr(length_blocks, "ROW_COST_PAIRS", cost)
        assert sum(block.segments for block in SegmentGrid.of(layout, owners, prompts).blocks) == segments


def test_only_rows_with_equal_prefix_tokens_length_and_routing_share() -> None:
    ids = torch.tensor([[5, 6, 7, 1], [5, 6, 7, 2], [5, 6, 8, 3], [5, 6, 7, 4], [5, 6, 7, 9]])
    prompts = torch.tensor([3, 3, 3, 3, 2])
    assert prefix_owners(ids, prompts).tolist() == [0, 0, 2, 0, 4]  # row 2: another token; row 4: another length
    routing = torch.zeros(5, 4, 1, 2, dtype=torch.int16)
    routing[3, 1, 0, 0] = 1  # row 3 routed one prompt token elsewhere
    replay = RouterReplay(routing, torch.ones(5, 4, dtype=torch.bool))
    assert prefix_owners(ids, prompts, replay).tolist() == [0, 0, 2, 3, 4]


@settings(max_examples=20, deadline=None)
@given(groups=st.integers(1, 3), samples=st.integers(1, 4), seed=st.integers(0, 999))
def test_a_shared_layout_unpacks_each_cell_as_its_own_forward_would(groups: int, samples: int, seed: int) -> None:
    ids, mask, prompts = _group_batch(groups, samples, seed)
    owners = prefix_owners(ids, prompts)
    layout = TokenLayout.of(ids, mask, owners=owners, shared=prompts)
    assert layout.num_tokens == int(mask.sum()) - int(prompts[owners != torch.arange(len(owners))].sum())
    unpacked = layout.unpack(layout.pack(ids))  # a token's id stands for its value
    assert torch.equal(unpacked, ids * mask)
    assert torch.equal(layout.unpack(layout.positions), torch.arange(ids.shape[1]).expand_as(ids) * mask)


def test_invariant_mode_computes_every_row_in_full() -> None:
    model = _model().eval()
    ids, mask, prompts = _group_batch(groups=2, samples=3, seed=3)
    with torch.no_grad():
        full = model(ids, mask, invariant=True).logits
        shared = model(ids, mask, invariant=True, shared_prefix=prompts).logits
    assert torch.equal(full, shared)


def _long_tail_batch(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GRPO batch whose responses run from 1 to 24 tokens: its rows fall into blocks of several lengths."""
    gen = torch.Generator().manual_seed(seed)
    rows, prompts = [], []
    for length in (1, 2, 3, 8, 12, 24):
        prompt = torch.randint(1, VOCAB, (4,), generator=gen)
        for extra in range(3):
            rows.append(torch.cat([prompt, torch.randint(1, VOCAB, (length + extra,), generator=gen)]))
            prompts.append(4)
    ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return ids, mask, torch.tensor(prompts)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("share", [False, True], ids=["rows", "shared"])
def test_blocks_of_similar_length_give_the_one_grid_forward(
    family: str, share: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(family)
    ids, mask, prompts = _long_tail_batch(seed=4)
    shared = prompts if share else None
    layout = TokenLayout.of(ids, mask, owners=prefix_owners(ids, prompts) if share else None, shared=shared)
    monkeypatch.setattr(length_blocks, "BLOCK_COST_PAIRS", 10**12)  # one block
    assert len(SegmentGrid.of(layout, None, None).blocks) == 1
    one, one_grads = _log_probs_and_grads(model, ids, mask, prompts, share)
    monkeypatch.setattr(length_blocks, "BLOCK_COST_PAIRS", 0)  # a block per length
    assert len(SegmentGrid.of(layout, None, None).blocks) > 4
    cut, cut_grads = _log_probs_and_grads(model, ids, mask, prompts, share)
    torch.testing.assert_close(cut, one, rtol=0, atol=2e-6)
    for a, b in zip(cut_grads, one_grads, strict=True):
        assert float((a - b).abs().max()) <= 1e-4 * float(b.abs().max()) + 1e-8
