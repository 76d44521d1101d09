"""Generation with a tool, in the plain format (a character tokenizer) and the chat format (a BPE chat tokenizer):
every finished turn's text (special tokens excluded) reaches the tool, its observation is appended unsampled and out
of the loss (in the chat format inside the template's tool message), the episode ends when the tool says so, and the
routing rows cover every position, each turn's rows kept from the pass that sampled it (the scripted engine encodes
the position and the version in every row)."""

from __future__ import annotations

import asyncio

import pytest
from moe_models import build_char_tokenizer, train_chat_tokenizer
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rollout_core import NOT_SAMPLED, SamplingParams, TrajectoryStatus
from rollout_core.testing import ScriptedEngine
from rollout_core.testing.scripted_engine import decode_row
from trainers.rollout.rollout import generate_all
from trainers.rollout.samples import GenRequest

PLAIN = Renderer(build_char_tokenizer("0123456789+=;#,:"), "plain")
CORPUS = "<|im_start|>user\n1,2,3:<|im_end|>\n<|im_start|>assistant\n1+2#<|im_end|>\n<|im_start|>tool\n=3;<|im_end|>\n"
CHAT = Renderer(train_chat_tokenizer([CORPUS, "0123456789"]))


class TwoCalls:
    """Answers the first two turns with `=<turn index>;`, then ends the episode; records what it was shown."""

    max_turns = 4
    max_observation_chars = 3

    def __init__(self) -> None:
        self.seen: list[str] = []

    def observation(self, example: TaskExample, turn_text: str) -> str | None:
        self.seen.append(turn_text)
        return f"={len(self.seen)};" if len(self.seen) <= 2 else None


@pytest.mark.parametrize("renderer", [PLAIN, CHAT], ids=["plain", "chat"])
def test_tool_turns_append_unsampled_observations_and_keep_every_routing_row(renderer: Renderer) -> None:
    tok = renderer.tokenizer
    # new weights (version 1) arrive mid-episode, while calls run on (as a `keep` push does)
    engine = ScriptedEngine(
        vocab_size=tok.vocab_size, eos_token_id=tok.eos_id, stop_prob=0.3, seed=3, events={5: "bump"}
    )
    tool = TwoCalls()
    example = TaskExample("u0", "calc", "1,2,3:", "#6")
    request = GenRequest("s1-p0-r0", "s1-p0", example, 0, 0, SamplingParams(max_new_tokens=6, seed=1))
    (traj,) = asyncio.run(generate_all(engine, renderer, [request], tool=tool))
    assert traj.status is TrajectoryStatus.OK and traj.num_turns == 3 and len(tool.seen) == 3
    specials = ("<eos>", "<bos>", "<pad>", "<|im_end|>", "<|im_start|>", "<|endoftext|>")
    assert not any(s in seen for seen in tool.seen for s in specials)  # special tokens never reach the tool
    text = renderer.response_text(traj.response_ids, traj.loss_mask)
    assert "".join(tool.seen[:2]) != "" and text.index("=1;") < text.index("=2;")  # both observations, in order
    observed = [i for i, v in enumerate(traj.token_versions) if v == NOT_SAMPLED]
    assert all(traj.loss_mask[i] == 0 for i in observed)
    assert all(traj.loss_mask[i] == 1 for i in range(len(traj.response_ids)) if i not in observed)
    runs = tok.decode([traj.response_ids[i] for i in observed])
    if renderer is PLAIN:
        assert runs == "=1;=2;"
    else:  # each observation is a tool message, closing the turn's assistant message before and opening the next
        wrapped = "\n<|im_start|>tool\n={};<|im_end|>\n<|im_start|>assistant\n"
        assert runs.count("<|im_start|>tool\n") == 2
        assert wrapped.format(1) in runs and wrapped.format(2) in runs
    n, prompt_len = traj.num_tokens, len(traj.prompt_ids)
    assert len(traj.routing) == n - 1 and traj.routing.missing(n) == []
    rows = traj.routing.to_numpy()
    assert [decode_row(rows[p])[0] for p in range(n - 1)] == [p % 256 for p in range(n - 1)]
    assert set(traj.token_versions) - {NOT_SAMPLED} == {0, 1}
    for j, v in enumerate(traj.token_versions):  # the row before a sampled token is the pass that sampled it
        if v != NOT_SAMPLED:
            assert traj.routing.versions[prompt_len + j - 1] == v == decode_row(rows[prompt_len + j - 1])[1]
