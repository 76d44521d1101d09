"""The sampler: greedy, temperature, top-k, top-p, full-vocabulary log-probs and counter-based seeding."""

import numpy as np
import torch
from engine_adapters.native.sampler import SamplingBatch, sample, uniform_rows
from hypothesis import given, settings
from hypothesis import strategies as st


def _batch(n, temperature=1.0, top_p=1.0, top_k=0, seed=0, counter=None) -> SamplingBatch:
    return SamplingBatch(
        temperature=torch.full((n,), float(temperature)),
        top_p=torch.full((n,), float(top_p)),
        top_k=torch.full((n,), top_k, dtype=torch.int64),
        seed=torch.full((n,), seed, dtype=torch.int64),
        counter=torch.arange(n, dtype=torch.int64) if counter is None else counter,
    )


def _draws(logits: torch.Tensor, n: int, **kw) -> tuple[np.ndarray, np.ndarray]:
    """n draws of one distribution: the same logits row with counters 0..n-1."""
    tokens, lps = sample(logits[None].expand(n, -1), _batch(n, **kw))
    return tokens.numpy(), lps.numpy()


def test_native_engine_sampler_greedy_takes_argmax_with_raw_log_softmax():
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    tokens, lps = sample(logits, _batch(5, temperature=0.0))
    assert torch.equal(tokens, logits.argmax(-1))
    expected = logits.log_softmax(-1).gather(-1, tokens[:, None]).squeeze(1)
    np.testing.assert_allclose(lps.numpy(), expected.numpy(), atol=1e-6)


def test_native_engine_sampler_matches_softmax_over_many_draws():
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 40_000
    for temperature in (1.0, 0.5, 2.0):
        tokens, _ = _draws(logits, n, temperature=temperature, seed=7)
        freq = np.bincount(tokens, minlength=6) / n
        expected = (logits / temperature).softmax(-1).numpy()
        assert np.max(np.abs(freq - expected)) < 0.01, (temperature, freq, expected)


def test_native_engine_sampler_top_k_and_top_p_restrict_support_but_not_the_reported_log_prob():
    logits = torch.tensor([3.0, 2.5, 2.0, 0.0, -1.0, -1.0, -2.0, -4.0])
    full = (logits / 0.9).log_softmax(-1)
    tokens, lps = _draws(logits, 5000, temperature=0.9, top_k=3, seed=1)
    assert set(tokens.tolist()) == {0, 1, 2}
    np.testing.assert_allclose(lps, full.numpy()[tokens], atol=1e-6)
    probs = full.exp()  # nucleus of mass 0.8: the smallest prefix of sorted tokens reaching 0.8
    cut = int((probs.cumsum(-1) < 0.8).sum()) + 1
    tokens, _ = _draws(logits, 5000, temperature=0.9, top_p=0.8, seed=2)
    assert set(tokens.tolist()) == set(range(cut))
    kept = probs[:cut] / probs[:cut].sum()
    assert np.max(np.abs(np.bincount(tokens, minlength=cut)[:cut] / 5000 - kept.numpy())) < 0.03


def test_native_engine_sampler_row_draws_do_not_depend_on_other_rows():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(1))
    batch = _batch(6, temperature=1.0, seed=0)
    batch.seed = torch.tensor([11, 12, 13, 14, 15, 16])
    tokens, _ = sample(logits, batch)
    for i in range(6):
        sub = _batch(1, seed=int(batch.seed[i]), counter=batch.counter[i : i + 1])
        alone, _ = sample(logits[i : i + 1], sub)
        assert int(alone) == int(tokens[i])
    pair = uniform_rows(torch.tensor([11, 99]), torch.tensor([0, 0]))
    assert float(pair[0]) == float(uniform_rows(torch.tensor([11]), torch.tensor([0]))[0])
    assert float(pair[0]) != float(pair[1])


def test_native_engine_uniform_rows_are_in_the_open_unit_interval_and_uniform():
    u = uniform_rows(torch.arange(64).repeat_interleave(1000), torch.arange(1000).repeat(64))
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    hist = torch.histc(u.float(), bins=10, min=0, max=1) / u.numel()
    assert float((hist - 0.1).abs().max()) < 0.01


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    vocab=st.integers(2, 60),
    temperature=st.floats(0.05, 3.0),
    top_k=st.integers(0, 70),
    top_p=st.floats(0.01, 1.0),
)
def test_native_engine_sampler_draws_only_allowed_tokens(seed, vocab, temperature, top_k, top_p):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, vocab, generator=gen) * 3
    tokens, lps = sample(logits, _batch(4, temperature, top_p, top_k, seed=seed))
    scaled = logits / temperature
    for row in range(4):
        order = scaled[row].argsort(descending=True).tolist()
        probs = scaled[row].softmax(-1)
        allowed = order[:top_k] if top_k > 0 else order
        mass = probs[allowed].cumsum(-1) - probs[allowed]
        renorm = mass / probs[allowed].sum()
        nucleus = [t for t, m in zip(allowed, renorm.tolist(), strict=True) if m < top_p - 1e-6] or allowed[:1]
        near = [t for t, m in zip(allowed, renorm.tolist(), strict=True) if m < top_p + 1e-6]
        assert int(tokens[row]) in set(nucleus) | set(near)
        assert abs(float(lps[row]) - float(scaled[row].log_softmax(-1)[tokens[row]])) < 1e-5
