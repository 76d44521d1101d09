"""A vLLM server as the distillation teacher: its prompt log-probs, in the student's shift, equal the native
engine's scoring of the same checkpoint (sampled slot and top-k) at temperature 1; they stay at temperature 1 when
asked for another, which is therefore refused."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from engine_adapters.vllm.teacher import VLLMTeacher, parse_prompt_logprobs
from engine_adapters_vllm_fixtures import ServedModel, requires_vllm_env

torch = pytest.importorskip("torch")

PAIRS = [([11, 57, 300, 42], [9, 120, 77, 5]), ([4, 8], [15, 16, 23, 42, 100, 7])]


def test_prompt_logprobs_become_rows_of_the_response_with_the_sampled_token_in_its_own_slot() -> None:
    entries = [
        None,
        {"5": {"logprob": -0.1, "rank": 1}},
        {"7": {"logprob": -0.5, "rank": 1}, "9": {"logprob": -3.0, "rank": 4}, "8": {"logprob": -1.0, "rank": 2}},
        {"6": {"logprob": -0.2, "rank": 1}, "2": {"logprob": -2.0, "rank": 2}},
    ]
    scores = parse_prompt_logprobs(entries, [1, 5, 9, 6], prompt_len=2, top_k=2, temperature=1.0)
    assert scores.sampled.tolist() == pytest.approx([-3.0, -0.2])  # tokens 9 (rank 4) and 6 (rank 1)
    assert scores.ids.tolist() == [[7, 8], [6, 2]] and scores.valid.all()
    assert scores.in_top_k.tolist() == [False, True]
    with pytest.raises(ValueError, match="missing from its own entry"):
        parse_prompt_logprobs(entries, [1, 5, 3, 6], prompt_len=2, top_k=2, temperature=1.0)


def test_a_vllm_teacher_refuses_a_temperature_other_than_1() -> None:
    with pytest.raises(ValueError, match=r"expected temperature 1\.0 \(vLLM's prompt log-probs are at temperature 1\)"):
        VLLMTeacher("http://127.0.0.1:1", temperature=0.7)


def _vllm_scores(served: ServedModel, temperature: float) -> list:  # type: ignore[type-arg]
    async def main() -> list:  # type: ignore[type-arg]
        teacher = VLLMTeacher(served.server.base_url, temperature=1.0, top_k=4)
        teacher.temperature = temperature  # bypasses the check, to measure what vLLM does
        try:
            return await teacher.score(PAIRS)
        finally:
            await teacher.close()

    return asyncio.run(main())


def _native_scores(served: ServedModel, temperature: float) -> list:  # type: ignore[type-arg]
    from engine_adapters.native.scoring import ScoreRequest, TeacherScorer

    scorer = TeacherScorer.load(served.loaded, temperature=temperature, top_k=4)
    return scorer.score([ScoreRequest(p, r) for p, r in PAIRS])


@pytest.mark.vllm
@requires_vllm_env
@pytest.mark.timeout(900)
def test_vllm_teacher_scores_equal_the_native_engines_and_stay_at_temperature_1(served: ServedModel) -> None:
    native = _native_scores(served, 1.0)
    for got, want in zip(_vllm_scores(served, 1.0), native, strict=True):
        np.testing.assert_allclose(got.sampled, want.sampled, atol=2e-3)
        np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-3)  # top-k values, in rank order
        assert (got.ids == want.ids).mean() > 0.9  # near-ties may swap ranks between engines
        assert (got.in_top_k == want.in_top_k).all()
    # asked for temperature 0.7, vLLM still answers at 1: why the teacher refuses any other temperature
    for got, want in zip(_vllm_scores(served, 0.7), native, strict=True):
        np.testing.assert_allclose(got.sampled, want.sampled, atol=2e-3)
