"""The C routed-experts kernel (`engine_adapters.native.decode.expert_kernel`) computes what
`decode_step.routed_experts` does, for any routing and thread count, and refuses bad input."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from engine_adapters.native.decode import expert_kernel
from engine_adapters.native.decode.decode_step import routed_experts

TOL = 1e-5


def _layer(seed: int, rows: int, hidden: int, inter: int, experts: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return dict(
        x=torch.randn(rows, hidden, generator=gen),
        h=torch.randn(rows, hidden, generator=gen),
        router=torch.randn(experts, hidden, generator=gen) * 0.3,
        gate_up=torch.randn(experts, hidden, 2 * inter, generator=gen) * hidden**-0.5,
        down=torch.randn(experts, inter, hidden, generator=gen) * inter**-0.5,
    )


def _kernel(w: dict[str, torch.Tensor], top_k: int, norm: bool, threads: int) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(w["x"] @ w["router"].T, dim=-1)
    top, ids = torch.topk(probs, top_k, dim=-1)
    if norm:
        top = top / top.sum(dim=-1, keepdim=True)
    return expert_kernel.moe_experts(w["x"], w["h"], ids, top, w["gate_up"], w["down"], threads), ids


@pytest.mark.parametrize(
    ("rows", "hidden", "inter", "experts", "top_k", "norm"),
    [
        (64, 128, 96, 8, 2, True),  # the tiny preset
        (5, 128, 96, 8, 2, False),  # fewer rows than a register tile; most experts idle
        (9, 64, 40, 16, 4, True),  # widths that are not multiples of the 64-column tile
        (1, 32, 8, 4, 1, False),
    ],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_the_grouped_matmul_experts(
    rows: int, hidden: int, inter: int, experts: int, top_k: int, norm: bool, threads: int
) -> None:
    w = _layer(rows + hidden + experts, rows, hidden, inter, experts)
    out, ids = _kernel(w, top_k, norm, threads)
    ref, ref_ids = routed_experts(
        w["x"], w["h"], w["router"], w["gate_up"], w["down"], torch.arange(experts), top_k, norm
    )
    assert ids.equal(ref_ids)
    assert (out - ref).abs().max().item() <= TOL


def test_kernel_results_do_not_depend_on_the_thread_count() -> None:
    w = _layer(1, 64, 128, 96, 8)
    one, _ = _kernel(w, 2, True, 1)
    assert all(_kernel(w, 2, True, n)[0].equal(one) for n in (2, 3))


def test_every_row_gets_only_its_own_experts() -> None:
    w = _layer(2, 6, 32, 8, 4)
    ids = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3]])
    weights = torch.rand(6, 2)
    out = expert_kernel.moe_experts(w["x"], w["h"], ids, weights, w["gate_up"], w["down"], 2)
    for s in range(6):  # brute force, one row and one expert at a time
        want = w["h"][s].clone()
        for e, g in zip(ids[s].tolist(), weights[s].tolist(), strict=True):
            gate, up = (w["x"][s] @ w["gate_up"][e]).chunk(2)
            want += g * ((torch.nn.functional.silu(gate) * up) @ w["down"][e])
        assert (out[s] - want).abs().max().item() <= TOL


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.update(ids=a["ids"] + 8), r"row 0 got expert ids \[8, 9\], expected ids in \[0, 8\)"),
        (lambda a: a.update(weights=a["weights"].double()), "weights got torch.float64"),
        (lambda a: a.update(x=a["x"].T.contiguous().T), "x got .* contiguous=False"),
        (lambda a: a.update(down=a["down"][:, :5].contiguous()), r"expected x and h \[S, hidden\]"),
        (lambda a: a.update(threads=0), "threads got 0"),
    ],
)
def test_kernel_refuses_bad_input_with_what_it_got(change: Callable[[dict], None], message: str) -> None:
    w = _layer(3, 4, 32, 8, 8)
    args = dict(
        x=w["x"],
        h=w["h"],
        ids=torch.tensor([[0, 1]] * 4),
        weights=torch.full((4, 2), 0.5),
        gate_up=w["gate_up"],
        down=w["down"],
        threads=1,
    )
    change(args)
    with pytest.raises(ValueError, match=message):
        expert_kernel.moe_experts(**args)
