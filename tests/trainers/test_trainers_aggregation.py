"""Loss aggregation: exact denominators, real counts, and independence from the micro-batch split."""

from __future__ import annotations

import pytest
import torch
from trainers.aggregation import AggMode, aggregate, count_nonempty_seqs, count_tokens

LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]], dtype=torch.float64)
MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float64)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-sum", 3.0 + 26.0),
        ("token-mean", 29.0 / 6.0),
        ("seq-mean-token-sum", (3.0 + 26.0) / 2.0),  # the empty third row is not a sequence
        ("seq-mean-token-mean", (1.5 + 6.5) / 2.0),
        ("seq-mean-token-sum-norm", (3.0 + 26.0) / 2.0 / 4.0),  # default scale: the width T = 4
    ],
)
def test_each_mode_divides_by_its_documented_real_count(mode: str, expected: float) -> None:
    assert float(aggregate(LOSS, MASK, mode)) == pytest.approx(expected, abs=1e-12)


def test_counts_are_real_tokens_and_nonempty_sequences() -> None:
    assert count_tokens(MASK) == 6.0
    assert count_nonempty_seqs(MASK) == 2.0


def test_padding_rows_and_columns_change_no_mode() -> None:
    wide = torch.cat([LOSS, torch.full((3, 2), 50.0, dtype=torch.float64)], dim=1)
    wide_mask = torch.cat([MASK, torch.zeros(3, 2, dtype=torch.float64)], dim=1)
    for mode in ("token-sum", "token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert float(aggregate(wide, wide_mask, mode)) == pytest.approx(float(aggregate(LOSS, MASK, mode)))
    base = float(aggregate(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=10.0))
    assert float(aggregate(wide, wide_mask, "seq-mean-token-sum-norm", loss_scale_factor=10.0)) == base


@pytest.mark.parametrize("mode", list(AggMode))
@pytest.mark.parametrize("seed", range(3))
def test_micro_batches_with_global_counts_sum_to_the_full_batch_loss(mode: AggMode, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(6, 9, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([9, 3, 0, 5, 1, 7])
    mask = (torch.arange(9)[None, :] < lengths[:, None]).to(torch.float64)
    kw = {"num_tokens": count_tokens(mask), "num_seqs": count_nonempty_seqs(mask), "loss_scale_factor": 9.0}
    full = aggregate(loss, mask, mode, **kw)
    # uneven split; the second micro-batch is trimmed to its own padded width
    parts = [(loss[:2], mask[:2]), (loss[2:, :7], mask[2:, :7])]
    total = sum(aggregate(lm, m, mode, **kw) for lm, m in parts)
    assert float(total) == pytest.approx(float(full), abs=1e-12)
    local = sum(aggregate(lm, m, mode, loss_scale_factor=9.0) for lm, m in parts)
    if mode is not AggMode.TOKEN_SUM:
        assert float(local) != pytest.approx(float(full), abs=1e-6)  # local counts do depend on the split


def test_an_all_padding_micro_batch_gives_an_exact_zero_with_zero_gradient() -> None:
    loss = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    for mode in AggMode:
        out = aggregate(loss, torch.zeros(2, 3), mode)
        (grad,) = torch.autograd.grad(out, loss)
        assert float(out.detach()) == 0.0 and bool((grad == 0).all())


def test_bad_inputs_raise_with_got_and_expected() -> None:
    with pytest.raises(ValueError, match="num_tokens must be > 0"):
        aggregate(LOSS, MASK, "token-mean", num_tokens=0)
    with pytest.raises(ValueError, match="same shape"):
        aggregate(LOSS, MASK[:, :3], "token-mean")
    with pytest.raises(ValueError, match="seq-mean-token-typo"):
        aggregate(LOSS, MASK, "seq-mean-token-typo")
