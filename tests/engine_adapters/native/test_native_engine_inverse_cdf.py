"""The sampler's inverse CDF: rows wider than a block are drawn in two levels (block sums, then one block), which
picks the same token as one float64 cumulative sum (up to float64 rounding at a boundary), never a zero-probability
entry, and per row alone (a row's draw does not depend on the rows beside it)."""

from __future__ import annotations

import torch
from engine_adapters.native.sampler import inverse_cdf
from hypothesis import given, settings
from hypothesis import strategies as st


def _rows(seed: int, rows: int, width: int, zeros: float) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    probs = torch.rand(rows, width, generator=g) ** 4  # peaked, as softmax rows are
    probs = probs * (torch.rand(rows, width, generator=g) >= zeros)  # filtered-out entries
    probs[:, 0] += 1e-3  # every row keeps a drawable entry
    return probs, torch.rand(rows, generator=g, dtype=torch.float64)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    width=st.integers(1, 200),
    block=st.sampled_from([1, 3, 16, 64]),
    zeros=st.sampled_from([0.0, 0.5, 0.95]),
)
def test_blocks_draw_the_token_one_cumulative_sum_draws(seed: int, width: int, block: int, zeros: float) -> None:
    probs, u = _rows(seed, 9, width, zeros)
    exact = inverse_cdf(probs, u, block=10**9)
    blocked = inverse_cdf(probs, u, block=block)
    assert torch.equal(blocked, exact)
    assert bool((probs.gather(1, blocked[:, None]) > 0).all())


def test_a_rows_draw_does_not_depend_on_the_rows_beside_it() -> None:
    probs, u = _rows(7, 32, 151_669, 0.0)
    together = inverse_cdf(probs, u)
    alone = torch.cat([inverse_cdf(probs[i : i + 1], u[i : i + 1]) for i in range(32)])
    assert torch.equal(together, alone)


def test_a_draw_at_the_very_top_takes_the_last_drawable_entry() -> None:
    probs = torch.tensor([[0.5, 0.25, 0.25, 0.0, 0.0]])  # u * total may round up to total
    top = torch.tensor([1.0], dtype=torch.float64)
    assert inverse_cdf(probs, top, block=2).item() == inverse_cdf(probs, top).item() == 2
