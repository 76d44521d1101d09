"""A backend that computes a group's prompt once (`TorchBackendConfig.share_prompts`) gives the update and the metrics
of one that computes every row in full, to float rounding; the step then keeps a group's rows in one micro-batch
and sizes micro-batches by the tokens computed (a prompt once per group)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import RouterReplay
from moe_models.shared_prefix import prefix_owners
from trainers import collate
from trainers.backend import OptimConfig, TorchBackend, split_by_token_budget
from trainers_fixtures import PAD, grads, rollouts, step, tiny_model

torch.set_num_threads(1)


def _step_with(share: bool, budget: int) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    model = tiny_model()
    batch = collate(rollouts(tiny_model(), num_prompts=4, per_prompt=3), PAD)
    assert batch.replay_ids is not None and batch.replay_mask is not None
    replay = RouterReplay(batch.replay_ids, batch.replay_mask)
    assert len(set(prefix_owners(batch.input_ids, batch.prompt_lengths, replay).tolist())) == 4  # one per prompt
    backend = TorchBackend(model, OptimConfig(lr=1e-2), share_prompts=share)
    assert backend.shares_prompts is share
    metrics = step(backend, batch, micro_batch_tokens=budget).metrics
    return grads(model), metrics


@pytest.mark.parametrize("budget", [10_000, 20])
def test_sharing_prompts_keeps_the_update_and_the_metrics(budget: int) -> None:
    (full, full_metrics), (shared, shared_metrics) = _step_with(False, budget), _step_with(True, budget)
    assert full.keys() == shared.keys() and len(full) > 0
    for name, value in full.items():
        torch.testing.assert_close(shared[name], value, atol=1e-6, rtol=1e-4, msg=name)
    for key in ("actor/pg_loss", "actor/grad_norm", "mismatch/replay/abs_diff_mean", "mismatch/replay/tokens"):
        assert shared_metrics[key] == pytest.approx(full_metrics[key], rel=1e-4, abs=1e-7), key


def test_a_group_shares_a_micro_batch_and_its_prompt_counts_once() -> None:
    lengths, prompts = [10, 6, 9, 7, 12, 8], [5, 5, 5, 4, 4, 4]
    groups = ["a", "a", "a", "b", "b", "b"]
    # group b holds the longest row: it goes first; 4 + (8 + 3 + 4) = 19 tokens, then a: 5 + (5 + 1 + 4) = 15
    assert split_by_token_budget(lengths, range(6), 20, groups, prompts) == [[4, 5, 3], [0, 2, 1]]
    assert split_by_token_budget(lengths, range(6), 34, groups, prompts) == [[4, 5, 3, 0, 2, 1]]
    with pytest.raises(ValueError, match="together"):
        split_by_token_budget(lengths, range(6), 20, groups, None)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(1, 20), st.integers(0, 3)), min_size=1, max_size=24),
    st.integers(1, 80),
)
def test_a_grouped_split_covers_every_row_once_within_its_budget(rows: list[tuple[int, int, int]], budget: int) -> None:
    groups = [f"g{g}" for _, _, g in rows]
    prompt_of = {g: p for p, _, g in reversed(rows)}  # a group's rows share one prompt length
    prompts = [prompt_of[g] for _, _, g in rows]
    lengths = [prompts[i] + r for i, (_, r, _) in enumerate(rows)]
    parts = split_by_token_budget(lengths, range(len(rows)), budget, groups, prompts)
    assert sorted(r for part in parts for r in part) == list(range(len(rows)))
    for part in parts:
        computed = sum({groups[r]: prompts[r] for r in part}.values()) + sum(lengths[r] - prompts[r] for r in part)
        assert len(part) == 1 or computed <= budget
    order = [groups[r] for part in parts for r in part]
    assert all(order.index(g) + order.count(g) - 1 == len(order) - 1 - order[::-1].index(g) for g in set(order))
