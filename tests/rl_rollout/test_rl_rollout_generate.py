"""Generation with a tool: every finished turn's text (special tokens excluded) reaches the tool, its observation
is appended unsampled and out of the loss, the episode ends when the tool says so, and the routing rows cover
every position, each turn's rows kept from the pass that sampled it (the scripted engine encodes the position and
the version in every row)."""

from __future__ import annotations

import asyncio

from moe_models import build_char_tokenizer
from rl_rollout.rollout import generate_all
from rl_rollout.samples import GenRequest
from rl_tasks.example import TaskExample
from rollout_core import NOT_SAMPLED, SamplingParams, TrajectoryStatus
from rollout_core.testing import ScriptedEngine
from rollout_core.testing.scripted_engine import decode_row

TOK = build_char_tokenizer("0123456789+=;#,:")


class TwoCalls:
    """Answers the first two turns with `=<turn index>;`, then ends the episode; records what it was shown."""

    max_turns = 4
    max_observation_chars = 3

    def __init__(self) -> None:
        self.seen: list[str] = []

    def observation(self, example: TaskExample, turn_text: str) -> str | None:
        self.seen.append(turn_text)
        return f"={len(self.seen)};" if len(self.seen) <= 2 else None


def test_tool_turns_append_unsampled_observations_and_keep_every_routing_row() -> None:
    # new weights (version 1) arrive mid-episode, while calls run on (as a `keep` push does)
    engine = ScriptedEngine(
        vocab_size=TOK.vocab_size, eos_token_id=TOK.eos_id, stop_prob=0.3, seed=3, events={5: "bump"}
    )
    tool = TwoCalls()
    example = TaskExample("u0", "calc", "1,2,3:", "#6")
    request = GenRequest("s1-p0-r0", "s1-p0", example, 0, 0, SamplingParams(max_new_tokens=6, seed=1))
    (traj,) = asyncio.run(generate_all(engine, TOK, [request], tool=tool))
    assert traj.status is TrajectoryStatus.OK and traj.num_turns == 3 and len(tool.seen) == 3
    assert not any("<" in seen for seen in tool.seen)  # special tokens (<eos>, <pad>, ...) never reach the tool
    text = TOK.decode(traj.response_ids, skip_special_tokens=True)
    assert "=1;" in text and "=2;" in text  # both observations, in order, in the response
    observed = [i for i, v in enumerate(traj.token_versions) if v == NOT_SAMPLED]
    assert len(observed) == 6 and all(traj.loss_mask[i] == 0 for i in observed)
    assert all(traj.loss_mask[i] == 1 for i in range(len(traj.response_ids)) if i not in observed)
    n, prompt_len = traj.num_tokens, len(traj.prompt_ids)
    assert len(traj.routing) == n - 1 and traj.routing.missing(n) == []
    rows = traj.routing.to_numpy()
    assert [decode_row(rows[p])[0] for p in range(n - 1)] == [p % 256 for p in range(n - 1)]
    assert set(traj.token_versions) - {NOT_SAMPLED} == {0, 1}
    for j, v in enumerate(traj.token_versions):  # the row before a sampled token is the pass that sampled it
        if v != NOT_SAMPLED:
            assert traj.routing.versions[prompt_len + j - 1] == v == decode_row(rows[prompt_len + j - 1])[1]
