"""The chunked head (`moe_models.head_log_probs`): log-probs, top-k log-probs, entropy (after the backward) and
gradients equal those of the whole logits computed at once (brute force, float64), for any chunking, shared tokens
and temperature; a batch that fits one chunk gives the whole-logits numbers bit for bit; the head's padding rows
beyond the tokenizer are never scored."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.head_log_probs import head_log_probs


def _case(seed: int, tokens: int, cells: int, vocab: int, hidden: int = 8, k: int = 3):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(tokens, hidden, generator=g, dtype=torch.float64)
    w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64)
    token = torch.sort(torch.randint(0, tokens, (cells,), generator=g)).values[torch.randperm(cells, generator=g)]
    target = torch.randint(0, vocab, (cells,), generator=g)
    at_ids = torch.randint(0, vocab, (cells, k), generator=g)
    return h, w, token, target, at_ids


def _brute(h, w, token, target, at_ids, temperature):
    z = (h[token] @ w.t()) / temperature  # [C, V]
    lsm = z.log_softmax(dim=-1)
    entropy = -(lsm.exp() * lsm).sum(dim=-1)
    return lsm.gather(1, target[:, None]).squeeze(1), lsm.gather(1, at_ids), entropy


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    tokens=st.integers(1, 9),
    cells=st.integers(1, 14),
    chunk_rows=st.integers(1, 10),
    temperature=st.sampled_from([1.0, 0.6, 1.7]),
    log_softmax=st.booleans(),
)
def test_chunked_head_equals_the_whole_logits_forward_and_backward(
    seed: int, tokens: int, cells: int, chunk_rows: int, temperature: float, log_softmax: bool
) -> None:
    vocab = 11
    h, w, token, target, at_ids = _case(seed, tokens, cells, vocab)
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    got = head_log_probs(
        h1, w1, token, target, temperature=temperature, at_ids=at_ids, log_softmax=log_softmax,
        with_entropy=True, chunk_elements=chunk_rows * vocab,
    )  # fmt: skip
    h2, w2 = h.clone().requires_grad_(), w.clone().requires_grad_()
    lp, at, entropy = _brute(h2, w2, token, target, at_ids, temperature)
    # the head computes in float32 (logits up to ~20 here): ~1e-5 of rounding against the float64 brute force
    torch.testing.assert_close(got.log_probs.double(), lp, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got.at.double(), at, rtol=1e-5, atol=1e-4)
    assert not got.entropy.any()  # filled by the backward, from the probabilities it computes anyway
    weights = torch.linspace(0.5, 1.5, cells, dtype=torch.float64)
    ((got.log_probs * weights).sum() + (got.at * 0.3).sum()).backward()
    ((lp * weights).sum() + (at * 0.3).sum()).backward()
    torch.testing.assert_close(got.entropy.double(), entropy.detach(), rtol=1e-5, atol=1e-4)
    # and its gradients, summed over up to 14 cells, carry more
    torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-4, atol=1e-4)


def test_the_log_softmax_formula_gives_log_softmax_gather_bit_for_bit_forward_and_backward() -> None:
    h, w, _, target, _ = _case(4, tokens=8, cells=8, vocab=17)
    h1, h2 = h.clone().requires_grad_(), h.clone().requires_grad_()
    got = head_log_probs(h1, w, torch.arange(8), target, log_softmax=True)
    want = (h2 @ w.t()).log_softmax(-1).gather(1, target[:, None]).squeeze(1)
    assert torch.equal(got.log_probs, want)
    weights = torch.linspace(0.5, 1.5, 8, dtype=torch.float64)
    (got.log_probs * weights).sum().backward()
    (want * weights).sum().backward()
    assert torch.equal(h1.grad, h2.grad)


def test_one_chunk_gives_the_whole_logits_numbers_bit_for_bit() -> None:
    h, w, token, target, _ = _case(3, tokens=6, cells=6, vocab=13)
    h, w = h.float().requires_grad_(), w.float().requires_grad_()
    token = torch.arange(6)
    got = head_log_probs(h, w, token, target)
    z = h @ w.t()
    want = z.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)
    assert torch.equal(got.log_probs, want)
    (g_got,) = torch.autograd.grad(got.log_probs.sum(), h)
    (g_want,) = torch.autograd.grad(want.sum(), h)
    assert torch.equal(g_got, g_want)


def test_bfloat16_autocast_uses_the_forward_dtype_in_the_backward() -> None:
    h, w, token, target, _ = _case(5, tokens=4, cells=7, vocab=9)
    h, w = h.float().requires_grad_(), w.float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = head_log_probs(h, w, token, target, chunk_elements=18)
        z = torch.nn.functional.linear(h[token], w).float()
    want = z.gather(1, target[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)
    torch.testing.assert_close(got.log_probs, want, rtol=0, atol=1e-6)
    (g_got,) = torch.autograd.grad(got.log_probs.sum(), w)
    (g_want,) = torch.autograd.grad(want.sum(), w)
    assert g_got.dtype == torch.float32
    torch.testing.assert_close(g_got, g_want, rtol=2e-2, atol=2e-2)  # bf16 products, summed in another order


def test_bad_inputs_are_refused_with_what_was_expected() -> None:
    h, w, token, target, _ = _case(0, tokens=3, cells=4, vocab=5)
    with pytest.raises(ValueError, match="temperature"):
        head_log_probs(h, w, token, target, temperature=0.0)
    with pytest.raises(ValueError, match=r"expected two \[C\] tensors"):
        head_log_probs(h, w, token, target[:2])
    with pytest.raises(ValueError, match=r"at_ids: expected \[C, K\]"):
        head_log_probs(h, w, token, target, at_ids=torch.zeros(3, 2, dtype=torch.int64))


IDS = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(1))


def _padded_head_model(tokenizer_vocab: int | None) -> MoEForCausalLM:
    """A model of 40 embedding rows whose head rows 32..39 (padding beyond a 32-id tokenizer) give logit 50 at every
    position of `IDS`: by far the largest."""
    config = MoEConfig.preset("tiny", vocab_size=40, num_hidden_layers=2, tokenizer_vocab_size=tokenizer_vocab)
    torch.manual_seed(0)
    model = MoEForCausalLM(config).eval()
    seen: list[torch.Tensor] = []
    handle = model.model.norm.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    with torch.no_grad():
        model(IDS)
        handle.remove()
        normed = seen[0].reshape(-1, config.hidden_size)  # [12, hidden]
        row = torch.linalg.lstsq(normed, torch.full((normed.shape[0], 1), 50.0)).solution[:, 0]  # normed @ row = 50
        model.lm_head.weight[32:] = row
    return model


def test_padding_rows_of_the_head_are_never_scored() -> None:
    ids = IDS
    padded, limited = _padded_head_model(None), _padded_head_model(32)
    with torch.no_grad():
        assert padded(ids).logits.shape[-1] == 40 and limited(ids).logits.shape[-1] == 32
        assert int(padded(ids).logits.argmax(-1).min()) >= 32  # the padding rows would win every position
        lp, _ = limited.token_log_probs(ids, None)
        logits = limited(ids).logits[:, :-1]
    want = logits.log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)  # over the tokenizer's 32 ids
    torch.testing.assert_close(lp, want, rtol=0, atol=1e-5)
    assert torch.equal(limited.head_weight(), limited.lm_head.weight[:32])


def test_a_tokenizer_larger_than_the_embedding_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tokenizer_vocab_size: got 41, expected None or 1\.\.vocab_size"):
        MoEConfig.preset("tiny", vocab_size=40, tokenizer_vocab_size=41)
