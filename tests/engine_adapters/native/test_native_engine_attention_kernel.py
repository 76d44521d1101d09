"""The C decode-attention kernel (`engine_adapters.native.decode.attention_kernel`) computes what the decode graph's
inline
attention does, for any slot layout, lengths (0 included), head grouping and thread count, and refuses bad input."""

from __future__ import annotations

import pytest
import torch
from engine_adapters.native.decode import attention_kernel
from engine_adapters.native.decode.decode_graph import GraphDims, _attend

TOL = 1e-5


def _inputs(
    seed: int, rows: int, heads: int, kv_heads: int, head_dim: int, num_slots: int = 9, max_len: int = 40
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_len, (rows,), generator=gen)
    lengths[0] = 0  # a row with no cached key attends to its own key only
    return dict(
        q=torch.randn(rows, heads, head_dim, generator=gen),
        k_new=torch.randn(rows, kv_heads, head_dim, generator=gen),
        v_new=torch.randn(rows, kv_heads, head_dim, generator=gen),
        key_cache=torch.randn(num_slots, kv_heads, max_len, head_dim, generator=gen),
        value_cache=torch.randn(num_slots, kv_heads, max_len, head_dim, generator=gen),
        slot_ids=torch.randperm(num_slots, generator=gen)[:rows],
        positions=lengths,
    )


def _inline(x: dict[str, torch.Tensor], scale: float) -> torch.Tensor:
    heads, kv_heads, head_dim = x["q"].shape[1], x["k_new"].shape[1], x["q"].shape[2]
    dims = GraphDims(heads, kv_heads, head_dim, scale, 2)
    key_index = torch.arange(max(int(x["positions"].max()), 1))
    return _attend(
        dims,
        *(x[k] for k in ("q", "k_new", "v_new", "key_cache", "value_cache", "slot_ids")),
        x["positions"],
        key_index,
    )


@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(4, 2, 32), (4, 4, 32), (8, 2, 64), (2, 1, 16)])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_the_inline_attention(heads: int, kv_heads: int, head_dim: int, threads: int) -> None:
    x = _inputs(heads * 100 + head_dim, rows=7, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    scale = head_dim**-0.5
    out = attention_kernel.decode_attention(**x, scale=scale, threads=threads)
    assert out.shape == (7, heads * head_dim)
    assert (out - _inline(x, scale)).abs().max().item() <= TOL


def test_kernel_results_do_not_depend_on_the_thread_count() -> None:
    x = _inputs(3, rows=33, heads=4, kv_heads=2, head_dim=32, num_slots=40)
    one = attention_kernel.decode_attention(**x, scale=0.2, threads=1)
    assert all(attention_kernel.decode_attention(**x, scale=0.2, threads=n).equal(one) for n in (2, 3))


def test_kernel_reads_only_each_rows_filled_positions() -> None:
    x = _inputs(4, rows=5, heads=4, kv_heads=2, head_dim=32)
    before = attention_kernel.decode_attention(**x, scale=0.2, threads=1)
    for slot, n in zip(x["slot_ids"].tolist(), x["positions"].tolist(), strict=True):
        x["key_cache"][slot, :, n:] = float("nan")  # stale positions: never read
        x["value_cache"][slot, :, n:] = float("nan")
    assert attention_kernel.decode_attention(**x, scale=0.2, threads=2).equal(before)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda x: x.update(slot_ids=x["slot_ids"] + 100), "expected a slot in"),
        (lambda x: x.update(positions=x["positions"] + 40), "fewer than 40 positions"),
        (lambda x: x.update(q=x["q"].double()), "expected a contiguous 3-d torch.float32"),
        (lambda x: x.update(q=x["q"].transpose(0, 1).contiguous().transpose(0, 1)), "contiguous=False"),
        (lambda x: x.update(k_new=x["k_new"][:, :1].contiguous()), "expected q [S, H, D]"),
        (lambda x: x.update(positions=x["positions"][:2]), "slot_ids and positions [S]"),
    ],
)
def test_kernel_refuses_bad_input_with_what_it_got(change: object, message: str) -> None:
    x = _inputs(5, rows=3, heads=4, kv_heads=2, head_dim=32)
    change(x)  # type: ignore[operator]
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        attention_kernel.decode_attention(**x, scale=0.2, threads=1)


def test_kernel_refuses_zero_threads() -> None:
    x = _inputs(6, rows=2, heads=4, kv_heads=2, head_dim=32)
    with pytest.raises(ValueError, match="threads got 0"):
        attention_kernel.decode_attention(**x, scale=0.2, threads=0)
