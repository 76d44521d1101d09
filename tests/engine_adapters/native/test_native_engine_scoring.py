"""TeacherScorer: one prefill scores every response token as a direct forward of the model does, in the student's
shift, with the top-k of the full distribution; batching does not change a score; bad input is refused."""

from __future__ import annotations

import pytest
import torch
from engine_adapters.native.scoring import ScoreRequest, TeacherScorer
from moe_models import MoEConfig, MoEForCausalLM

torch.set_num_threads(1)
VOCAB = 37


def _model() -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=64))


REQUESTS = [
    ScoreRequest([1, 5, 9], [4, 4, 7, 2]),
    ScoreRequest([1], [3]),
    ScoreRequest([1, 2, 3, 4, 5, 6], [8, 30, 11]),
    ScoreRequest([2, 9], []),
]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_slot_and_top_k_match_a_direct_forward(temperature: float) -> None:
    model = _model()
    scores = TeacherScorer(model, temperature=temperature, top_k=5).score(REQUESTS)
    for r, s in zip(REQUESTS, scores, strict=True):
        seq = torch.tensor([[*r.prompt_ids, *r.response_ids]])
        with torch.no_grad():
            full = torch.log_softmax(model(seq).logits[0].float() / temperature, dim=-1)  # row t: token t + 1
        p = len(r.prompt_ids)
        assert s.num_rows == len(r.response_ids) and s.top_k == 5 and s.temperature == temperature
        for j, token in enumerate(r.response_ids):
            row = full[p - 1 + j]
            assert s.sampled[j] == pytest.approx(float(row[token]), abs=1e-5)
            top = row.topk(5)
            assert s.ids[j].tolist() == top.indices.tolist()
            assert s.logprobs[j] == pytest.approx(top.values.numpy(), abs=1e-5)
            assert bool(s.in_top_k[j]) == (token in top.indices.tolist())
            assert s.top_k_mass[j] == pytest.approx(float(top.values.exp().sum()), abs=1e-5)
        if r.response_ids:
            lp, _ = model.token_log_probs(seq, None, temperature=temperature)
            assert s.sampled.tolist() == pytest.approx(lp[0, p - 1 :].tolist(), abs=1e-5)


def test_a_score_does_not_depend_on_the_batch_it_was_scored_in() -> None:
    model = _model()
    together = TeacherScorer(model, temperature=1.0, batch_tokens=4096).score(REQUESTS)
    alone = TeacherScorer(model, temperature=1.0, batch_tokens=1).score(REQUESTS)
    for a, b in zip(together, alone, strict=True):
        assert a.sampled == pytest.approx(b.sampled, abs=1e-5)
        assert a.top_k == 0 and not a.in_top_k.any()


def test_bad_requests_and_settings_are_refused_with_got_and_expected() -> None:
    scorer = TeacherScorer(_model(), temperature=1.0)
    with pytest.raises(ValueError, match="expected at most the teacher's context of 64"):
        scorer.score([ScoreRequest([1] * 60, [2] * 5)])
    with pytest.raises(ValueError, match="outside the teacher's vocabulary of 37"):
        scorer.score([ScoreRequest([1], [VOCAB])])
    with pytest.raises(ValueError, match="at least one prompt token"):
        scorer.score([ScoreRequest([], [2])])
    with pytest.raises(ValueError, match=r"top_k: expected 0\.\.37"):
        TeacherScorer(_model(), temperature=1.0, top_k=VOCAB + 1)
    with pytest.raises(ValueError, match="temperature > 0"):
        TeacherScorer(_model(), temperature=0.0)
