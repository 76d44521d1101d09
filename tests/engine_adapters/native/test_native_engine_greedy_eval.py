"""Greedy decoding, the tool loop and accuracy with scripted models whose next token is known exactly (a character
tokenizer in the plain prompt format, `[bos] + prompt`), and the calculator's greedy episodes in the default chat
format."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import torch
from engine_adapters.native.greedy_eval import evaluate_greedy, greedy_decode, greedy_episodes
from moe_models import build_char_tokenizer
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.exact_match import ExactMatchReward
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardResult
from rl_tasks.task_tokenizer import task_renderer

TOK = build_char_tokenizer("0123456789")
PLAIN = Renderer(TOK, "plain")


def _examples(prompts: list[str]) -> list[TaskExample]:
    return [TaskExample(f"e{i}", "s", p, "") for i, p in enumerate(prompts)]


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
    out = greedy_decode(model, PLAIN, _examples(prompts), max_new_tokens=4, batch_size=2)
    assert [TOK.decode(ids) for ids in out] == ["210", "4321", "", "8765", "10"]
    assert all(shape[0] <= 2 for shape in model.calls)
    assert {shape[1] for shape in model.calls} >= {2, 3}  # one bucket per prompt length (bos + chars)


def test_greedy_decode_restores_training_mode() -> None:
    model = CountDown()
    model.train()
    greedy_decode(model, PLAIN, _examples(["5"]), max_new_tokens=2)
    assert model.training


def test_accuracy_overall_and_per_source() -> None:
    examples = [
        TaskExample("a", "down", "3", "210"),
        TaskExample("b", "down", "5", "43210"),
        TaskExample("c", "other", "2", "10"),
        TaskExample("d", "other", "4", "999"),
    ]
    res = evaluate_greedy(CountDown(), PLAIN, examples, ExactMatchReward(), max_new_tokens=8)
    assert (res.num_examples, res.num_errors, res.accuracy) == (4, 0, 0.75)
    assert res.accuracy_by_source == {"down": 1.0, "other": 0.5}
    assert res.mean_response_tokens == (3 + 5 + 2 + 4) / 4


def test_reward_errors_are_counted_and_excluded_not_scored_zero() -> None:
    def picky(text: str, ex: TaskExample) -> RewardResult:
        if ex.uid == "bad":
            raise RuntimeError("cannot score")
        return ExactMatchReward()(text, ex)

    examples = [TaskExample("ok", "down", "1", "0"), TaskExample("bad", "down", "2", "10")]
    res = evaluate_greedy(CountDown(), PLAIN, examples, picky, max_new_tokens=4)
    assert (res.num_errors, res.accuracy) == (1, 1.0)
    with pytest.raises(ValueError, match=r"every reward call failed.*cannot score"):
        evaluate_greedy(CountDown(), PLAIN, examples[1:], picky, max_new_tokens=4)


@dataclass
class _ScriptedTool:
    """Answers the first `calls` turns with `text`, then ends; records what it was asked."""

    max_turns: int
    text: str
    calls: int
    seen: list[tuple[str, str]] = field(default_factory=list)

    def observation(self, example: TaskExample, turn_text: str) -> str | None:
        self.seen.append((example.uid, turn_text))
        return self.text if len(self.seen) <= self.calls else None


class _Recording(CountDown):
    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[list[int]] = []

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> _Out:
        self.contexts += input_ids.tolist()
        return super().forward(input_ids, attention_mask)


def test_tool_loop_appends_eos_and_observation_then_decodes_the_next_turn() -> None:
    model, tool = _Recording(), _ScriptedTool(max_turns=4, text="3", calls=1)
    (episode,) = greedy_episodes(model, PLAIN, [TaskExample("a", "s", "2", "")], tool, max_new_tokens=6)
    assert tool.seen == [("a", "10"), ("a", "210")]  # EOS never reaches the tool
    assert (episode.text, episode.model_tokens, episode.num_turns) == ("10" + "3" + "210", 2 + 3, 2)
    turn_two = [TOK.bos_id, *TOK.encode("210"), TOK.eos_id, *TOK.encode("3")]
    assert turn_two in model.contexts  # the second turn starts from prompt + turn + EOS + observation


def test_tool_loop_stops_at_max_turns_without_asking_for_a_last_observation() -> None:
    tool = _ScriptedTool(max_turns=3, text="1", calls=99)
    (episode,) = greedy_episodes(CountDown(), PLAIN, [TaskExample("a", "s", "1", "")], tool, max_new_tokens=4)
    assert (episode.text, episode.num_turns) == ("0" + "1" + "0" + "1" + "0", 3)
    assert len(tool.seen) == 2


def test_a_turn_cut_by_the_budget_is_observed_without_eos() -> None:
    model, tool = _Recording(), _ScriptedTool(max_turns=2, text="2", calls=1)
    (episode,) = greedy_episodes(model, PLAIN, [TaskExample("a", "s", "9", "")], tool, max_new_tokens=3)
    assert tool.seen == [("a", "876")] and episode.text == "876" + "2" + "10"
    assert [TOK.bos_id, *TOK.encode("98762")] in model.contexts


class _Oracle(torch.nn.Module):
    """Predicts, for every context it was built from, the next token of that training sequence (EOS after
    anything else): a perfect student of the demonstrations."""

    def __init__(self, rows: list[list[int]], vocab_size: int, eos_id: int) -> None:
        super().__init__()
        self.next = {tuple(row[:t]): row[t] for row in rows for t in range(1, len(row))}
        self.vocab_size, self.eos_id = vocab_size, eos_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> _Out:
        nxt = torch.tensor([self.next.get(tuple(row), self.eos_id) for row in input_ids.tolist()])
        logits = torch.nn.functional.one_hot(nxt, self.vocab_size).float()[:, None, :]
        return _Out(logits.expand(input_ids.shape[0], input_ids.shape[1], self.vocab_size))


@pytest.mark.parametrize("prompt_format", ["chat", "plain"])
def test_greedy_tool_episodes_follow_the_layout_the_warmup_trains_on(prompt_format: str) -> None:
    config = CalculatorTaskConfig(min_terms=2, max_terms=4, max_digits=3, train_size=20, val_size=30)
    task = dataclasses.replace(config, prompt_format=prompt_format).build()
    assert task.tool is not None
    renderer = task_renderer(task)
    tok, val = renderer.tokenizer, task.splits.validation
    rows = [renderer.demonstration(ex, task.demonstration(ex))[0] for ex in val]
    oracle = _Oracle(rows, tok.vocab_size, tok.eos_id)
    budget = task.max_answer_chars + 1
    res = evaluate_greedy(oracle, renderer, val, task.reward_fn, max_new_tokens=budget, batch_size=7, tool=task.tool)
    assert (res.accuracy, res.num_errors) == (1.0, 0)
    episodes = greedy_episodes(oracle, renderer, val, task.tool, max_new_tokens=budget)
    for ex, ep in zip(val, episodes, strict=True):
        pieces = task.demonstration(ex)
        assert ep.text == "".join(p.text for p in pieces)
        assert ep.num_turns == sum(p.trainable for p in pieces)
    assert evaluate_greedy(oracle, renderer, val, task.reward_fn, max_new_tokens=budget).accuracy == 0.0


class _Uncached(torch.nn.Module):
    """A moe_models model behind a plain module, so greedy decoding takes the uncached per-token forward."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> _Out:
        return _Out(self.model(input_ids, attention_mask).logits)


def test_kv_cached_greedy_of_a_moe_model_equals_the_uncached_forward_per_token() -> None:
    from moe_models import MoEConfig, MoEForCausalLM

    tok = build_char_tokenizer("0123456789+=")
    torch.manual_seed(0)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=tok.vocab_size, pad_token_id=tok.pad_id))
    with torch.no_grad():  # a random model rarely emits EOS: make it likelier, so rows finish at different steps
        model.lm_head.weight[tok.eos_id] *= 3.0
    examples, renderer = _examples(["1+2=", "31+4=", "9=", "123+45=", "7+7=", "0="]), Renderer(tok, "plain")
    cached = greedy_decode(model, renderer, examples, max_new_tokens=12, batch_size=4)
    plain = greedy_decode(_Uncached(model), renderer, examples, max_new_tokens=12, batch_size=4)
    assert cached == plain
    assert len({len(ids) for ids in cached}) > 1  # rows stopped at different steps (EOS), not all at the budget
