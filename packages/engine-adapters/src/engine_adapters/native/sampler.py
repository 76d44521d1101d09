"""Sampler: next tokens and their log-probs for a batch of rows, each with its own sampling parameters.

Log-prob convention (what the trainer recomputes with `model.token_log_probs(..., temperature=T)`): the log-prob of
a token is `log_softmax(logits / T)` over the FULL vocabulary at the sampled id, with `T` the request's temperature
(raw logits when `T == 0`, greedy), taken before top-k / top-p filtering. Filtering only changes which token is
drawn, not the number reported.

Randomness is counter-based: row `r` draws one uniform number, a hash of (request seed, index of the token in the
call), and takes the inverse CDF of its filtered, renormalised, temperature-scaled softmax. Every operation is
row-wise, so a seeded request draws the same tokens whatever else shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shr(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser on int64 tensors (wrapping arithmetic)."""
    x = x + _signed(_GOLDEN)
    x = (x ^ _shr(x, 30)) * _signed(_MIX1)
    x = (x ^ _shr(x, 27)) * _signed(_MIX2)
    return x ^ _shr(x, 31)


def uniform_rows(seeds: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One uniform (0, 1) float64 draw per row `[S]`, a pure function of (seed, counter) of that row."""
    bits = _shr(_splitmix64(_splitmix64(seeds.to(torch.int64)) ^ counters.to(torch.int64)), 11)  # 53 bits
    return (bits.to(torch.float64) + 0.5) * (1.0 / (1 << 53))


@dataclass
class SamplingBatch:
    """Per-row sampling parameters of one step, all `[S]`."""

    temperature: torch.Tensor  # float32, 0 = greedy
    top_p: torch.Tensor  # float32 in (0, 1]
    top_k: torch.Tensor  # int64, 0 = off
    seed: torch.Tensor  # int64
    counter: torch.Tensor  # int64: index of the token being sampled within its call


def _filter(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Sets logits outside each row's top-k / top-p nucleus to -inf (at least the best token survives)."""
    sorted_logits, order = scaled.sort(dim=-1, descending=True)  # [S, V]
    vocab = scaled.shape[-1]
    rank = torch.arange(vocab, device=scaled.device)[None, :]
    k = torch.where(top_k > 0, top_k, vocab)[:, None]
    drop = rank >= k
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # probability of strictly better tokens
    drop |= mass_before >= top_p[:, None]
    drop[:, 0] = False
    return scaled.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))


@dataclass(frozen=True)
class PreparedSampling:
    """What `sample` derives from a `SamplingBatch` before looking at logits; fixed for a burst of steps.

    temperature: [S, 1] float32, greedy rows set to 1 (their logits are used raw). greedy: [S] bool, None when no
    row is greedy. Host flags say which branches the batch needs, so a step has no host sync for them."""

    temperature: torch.Tensor
    greedy: torch.Tensor | None
    all_greedy: bool
    top_k: torch.Tensor | None  # [S] int64 and [S] float32, None when no row filters
    top_p: torch.Tensor | None


def prepare(batch: SamplingBatch) -> PreparedSampling:
    greedy = batch.temperature <= 0
    any_greedy, all_greedy = bool(greedy.any()), bool(greedy.all())
    filtered = bool(((batch.top_k > 0) | (batch.top_p < 1.0)).any())
    temperature = torch.where(greedy, torch.ones_like(batch.temperature), batch.temperature)[:, None]
    return PreparedSampling(
        temperature=temperature,
        greedy=greedy if any_greedy else None,
        all_greedy=all_greedy,
        top_k=batch.top_k if filtered else None,
        top_p=batch.top_p if filtered else None,
    )


def sample_prepared(
    logits: torch.Tensor, prep: PreparedSampling, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` with its per-batch part done (`prepare`) and each row's uniform draw given ([S] float64, from
    `uniform_rows`): the same tokens and log-probs, bit for bit."""
    logits = logits.float()
    if prep.all_greedy:
        tokens = logits.argmax(dim=-1)
        return tokens, logits.log_softmax(dim=-1).gather(-1, tokens[:, None]).squeeze(1)
    scaled = logits / prep.temperature  # [S, V]
    log_probs = scaled.log_softmax(dim=-1)
    if prep.top_k is not None and prep.top_p is not None:
        probs = _filter(scaled, prep.top_k, prep.top_p).softmax(dim=-1)
    else:
        probs = log_probs.exp()
    tokens = inverse_cdf(probs, uniforms)
    if prep.greedy is not None:
        tokens = torch.where(prep.greedy, scaled.argmax(dim=-1), tokens)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(1)


CDF_BLOCK = 4096  # vocabulary entries per block of the two-level inverse CDF (wider rows than this use it)


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor, block: int = CDF_BLOCK) -> torch.Tensor:
    """`[S]` int64: in each row of `probs` `[S, V]` (float32, unnormalised, zeros never drawn), the first entry whose
    running sum exceeds `uniform * total`. A row of at most `block` entries is one float64 cumulative sum. A wider
    one (a 151k-token vocabulary) is two levels: the sums of its blocks of `block` entries (float64), their cumulative
    sum to find the block, then the cumulative sum of that block alone; that reads the row once instead of writing a
    float64 copy and its cumulative sum, and differs from the one sum only in float64 rounding (which token a draw
    within ~1e-16 of a boundary picks). Both are per row, so a row's token does not depend on the others."""
    width = probs.shape[1]
    if width <= block:
        cdf = probs.double().cumsum(dim=-1)  # [S, V]; filtered-out tokens add 0 and are never drawn
        u = uniforms * cdf[:, -1]  # [S]
        return torch.minimum(torch.searchsorted(cdf, u[:, None], right=True), _last_positive(probs)).squeeze(1)
    full = width // block
    sums = probs.unfold(1, block, block).sum(dim=-1, dtype=torch.float64)  # [S, full], no copy of the row
    if width > full * block:
        sums = torch.cat([sums, probs[:, full * block :].sum(dim=-1, dtype=torch.float64)[:, None]], dim=1)
    cdf = sums.cumsum(dim=-1)  # [S, blocks]
    u = uniforms * cdf[:, -1]
    k = torch.minimum(torch.searchsorted(cdf, u[:, None], right=True), _last_positive(sums))  # [S, 1] the block
    before = torch.where(k > 0, cdf.gather(1, (k - 1).clamp_min(0)), torch.zeros_like(u[:, None]))
    cols = k * block + torch.arange(block, device=probs.device)  # [S, block]
    inside = cols < width
    part = probs.gather(1, cols.clamp_max(width - 1)) * inside  # [S, block]: the block, zeros past the row
    j = torch.searchsorted(part.double().cumsum(dim=-1), u[:, None] - before, right=True)  # [S, 1]
    return (k * block + torch.minimum(j, _last_positive(part))).squeeze(1)


def _last_positive(values: torch.Tensor) -> torch.Tensor:
    """`[S, 1]`: each row's last positive entry: where a draw lands that rounding carried past the row's (or a
    block's) own total, `u * total` rounding up to `total`."""
    index = torch.arange(values.shape[1], device=values.device)
    return torch.where(values > 0, index, -1).amax(dim=1, keepdim=True)


def sample(logits: torch.Tensor, batch: SamplingBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids [S] int64, log-probs [S] float32) for logits `[S, V]` (see the module docstring)."""
    return sample_prepared(logits, prepare(batch), uniform_rows(batch.seed, batch.counter))
