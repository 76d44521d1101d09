"""Greedy decoding and accuracy with a scripted model whose next token is known exactly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from moe_models import build_char_tokenizer
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.greedy_eval import evaluate_greedy, greedy_decode
from rl_tasks.reward import RewardResult

TOK = build_char_tokenizer("0123456789")


@dataclass
class _Out:
    logits: torch.Tensor


class CountDown(torch.nn.Module):
    """After digit d it predicts d-1; after 0 (or a special token) it predicts EOS."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, ...]] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> _Out:
        assert bool(attention_mask.all()), "greedy batches must hold no padding"
        self.calls.append(tuple(input_ids.shape))
        digit = input_ids - TOK.encode("0")[0]  # [B, T]; < 0 for special tokens
        nxt = torch.where(digit > 0, input_ids - 1, torch.full_like(input_ids, TOK.eos_id))
        return _Out(torch.nn.functional.one_hot(nxt, TOK.vocab_size).float())


def test_greedy_decode_stops_at_eos_truncates_and_keeps_input_order() -> None:
    model = CountDown()
    prompts = ["3", "15", "0", "9", "42"]
    out = greedy_decode(model, TOK, prompts, max_new_tokens=4, batch_size=2)
    assert [TOK.decode(ids) for ids in out] == ["210", "4321", "", "8765", "10"]
    assert all(shape[0] <= 2 for shape in model.calls)
    assert {shape[1] for shape in model.calls} >= {2, 3}  # one bucket per prompt length (bos + chars)


def test_greedy_decode_restores_training_mode() -> None:
    model = CountDown()
    model.train()
    greedy_decode(model, TOK, ["5"], max_new_tokens=2)
    assert model.training


def test_accuracy_overall_and_per_source() -> None:
    examples = [
        TaskExample("a", "down", "3", "210"),
        TaskExample("b", "down", "5", "43210"),
        TaskExample("c", "other", "2", "10"),
        TaskExample("d", "other", "4", "999"),
    ]
    res = evaluate_greedy(CountDown(), TOK, examples, ExactMatchReward(), max_new_tokens=8)
    assert (res.num_examples, res.num_errors, res.accuracy) == (4, 0, 0.75)
    assert res.accuracy_by_source == {"down": 1.0, "other": 0.5}
    assert res.mean_response_tokens == (3 + 5 + 2 + 4) / 4


def test_reward_errors_are_counted_and_excluded_not_scored_zero() -> None:
    def picky(text: str, ex: TaskExample) -> RewardResult:
        if ex.uid == "bad":
            raise RuntimeError("cannot score")
        return ExactMatchReward()(text, ex)

    examples = [TaskExample("ok", "down", "1", "0"), TaskExample("bad", "down", "2", "10")]
    res = evaluate_greedy(CountDown(), TOK, examples, picky, max_new_tokens=4)
    assert (res.num_errors, res.accuracy) == (1, 1.0)
    with pytest.raises(ValueError, match=r"every reward call failed.*cannot score"):
        evaluate_greedy(CountDown(), TOK, examples[1:], picky, max_new_tokens=4)
