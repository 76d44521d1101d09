"""TrainSample from a Trajectory, and collate: shift alignment, routing replay, status rejection."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rollout_core import NOT_SAMPLED, RoutingSpec, RoutingTrace, Trajectory, TrajectoryStatus
from trainers.batch import collate
from trainers.padding import make_padding_sample
from trainers.sample import TrainSample

SPEC = RoutingSpec(num_layers=2, top_k=2, num_experts=8)


def _trace(num_rows: int, seed: int) -> tuple[RoutingTrace, np.ndarray]:
    rows = np.random.default_rng(seed).integers(0, 8, size=(num_rows, 2, 2))
    trace = RoutingTrace(SPEC)
    trace.extend(rows, version=5, start=0)
    return trace, rows


def _traj(
    prompt: list[int], response: list[int], *, rows: int | None = None, seed: int = 0, **kw: object
) -> Trajectory:
    n = len(response)
    trace = None if rows is None else _trace(rows, seed)[0]
    base: dict[str, object] = dict(
        prompt_ids=prompt,
        response_ids=response,
        response_log_probs=[-0.1 * (i + 1) for i in range(n)],
        token_versions=[3] * n,
        loss_mask=[1] * n,
        routing=trace,
    )
    return Trajectory(**(base | kw))  # type: ignore[arg-type]


def _sample(traj: Trajectory, uid: str = "u0", group: str = "g0") -> TrainSample:
    return TrainSample.from_trajectory(traj, uid=uid, group_id=group, reward=1.0, acc=1.0, data_source="toy")


def test_from_trajectory_copies_every_field_without_aliasing() -> None:
    traj = _traj([1, 2, 3], [4, 5], rows=4, loss_mask=[1, 0], token_versions=[3, NOT_SAMPLED], num_turns=2)
    s = _sample(traj)
    assert (s.prompt_ids, s.response_ids, s.loss_mask, s.token_versions) == ([1, 2, 3], [4, 5], [1, 0], [3, -1])
    assert s.rollout_log_probs == pytest.approx([-0.1, -0.2]) and s.num_turns == 2 and s.routing == traj.routing
    traj.response_ids.append(9)
    traj.routing.extend(np.zeros((1, 2, 2), dtype=np.uint8), version=6, start=4)  # type: ignore[union-attr]
    assert s.response_ids == [4, 5] and len(s.routing) == 4  # type: ignore[arg-type]


def test_collate_aligns_response_entries_with_the_log_prob_shift() -> None:
    a = _sample(_traj([1, 2, 3], [4, 5], loss_mask=[1, 0]), uid="a")
    b = _sample(_traj([7], [8, 9, 10, 11]), uid="b")
    batch = collate([a, b], pad_token_id=0)
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [7, 8, 9, 10, 11]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch.response_mask.tolist() == [[0, 0, 1, 0], [1, 1, 1, 1]]
    assert batch.rollout_log_probs[0].tolist() == pytest.approx([0, 0, -0.1, -0.2])
    assert batch.token_versions.tolist() == [[-1, -1, 3, 3], [3, 3, 3, 3]]
    # entry t scores token t+1: every scored token is a response token of its own sample
    for row, s in enumerate([a, b]):
        scored = batch.input_ids[row, 1:][batch.response_mask[row] > 0].tolist()
        assert scored == [t for t, m in zip(s.response_ids, s.loss_mask, strict=True) if m]
    assert batch.num_loss_tokens == 5 and batch.replay_ids is None and batch.replay_mask is None


def test_collate_right_pads_with_the_pad_token() -> None:
    batch = collate([_sample(_traj([1, 2], [3])), _sample(_traj([4], [5, 6, 7]), uid="b")], pad_token_id=99)
    assert batch.input_ids[0].tolist() == [1, 2, 3, 99] and batch.attention_mask[0].tolist() == [1, 1, 1, 0]
    assert batch.response_mask.shape == (2, 3) and batch.seq_lengths.tolist() == [3, 4]


def test_collate_places_routing_rows_and_masks_positions_without_a_record() -> None:
    trace_a, rows_a = _trace(4, seed=1)  # prompt 3 + response 2: N - 1 = 4 rows
    a = _sample(_traj([1, 2, 3], [4, 5], routing=trace_a), uid="a")
    trace_b, rows_b = _trace(3, seed=2)  # a sequence of 6 tokens with only 3 recorded rows
    b = _sample(_traj([1, 2], [3, 4, 5, 6], routing=trace_b), uid="b")
    pad = make_padding_sample("p0", "pad", pad_token_id=0)
    batch = collate([a, b, pad], pad_token_id=0)
    assert batch.replay_ids is not None and batch.replay_mask is not None
    assert batch.replay_ids.shape == (3, 6, 2, 2) and batch.replay_ids.dtype == torch.int16
    assert np.array_equal(batch.replay_ids[0, :4].numpy(), rows_a) and bool((batch.replay_ids[0, 4:] == 0).all())
    assert np.array_equal(batch.replay_ids[1, :3].numpy(), rows_b)
    assert batch.replay_mask.tolist() == [[True] * 4 + [False] * 2, [True] * 3 + [False] * 3, [False] * 6]


def test_collate_rejects_samples_whose_status_is_not_ok() -> None:
    ok = _sample(_traj([1], [2]))
    for status in (TrajectoryStatus.TRUNCATED, TrajectoryStatus.ABORTED, TrajectoryStatus.ERROR):
        bad = _sample(_traj([1], [2], status=status), uid="bad")
        with pytest.raises(ValueError, match="status ok"):
            collate([ok, bad], pad_token_id=0)


def test_collate_rejects_mixed_routing_among_real_samples() -> None:
    routed = _sample(_traj([1, 2], [3], rows=2))
    dense = _sample(_traj([1, 2], [3]), uid="d")
    with pytest.raises(ValueError, match="one spec"):
        collate([routed, dense], pad_token_id=0)


def test_sample_validation_names_got_and_expected() -> None:
    with pytest.raises(ValueError, match="expected 2 entries"):
        TrainSample("u", "g", "d", [1], [2, 3], [1], [0.0, 0.0], [1, 1], reward=0.0)
    with pytest.raises(ValueError, match="at least one prompt token"):
        TrainSample("u", "g", "d", [], [2], [1], [0.0], [1], reward=0.0)
    with pytest.raises(ValueError, match="at most 2 rows"):
        TrainSample("u", "g", "d", [1, 2], [3], [1], [0.0], [1], reward=0.0, routing=_trace(3, 0)[0])
