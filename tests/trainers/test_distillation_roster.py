"""Several teachers (`teacher.sources`): each sample is scored by its data source's teacher, samples of other sources
by the default teacher (named teachers never remove it), and a bad entry or an unknown data source fails before the
run, got/expected."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from moe_models import MoEConfig, MoEForCausalLM, build_char_tokenizer, save_pretrained
from rl_tasks.example import TaskExample
from rl_tasks.model_config import ModelConfig
from rl_tasks.toy_task import ToyTaskConfig
from rollout_core import SamplingParams, Trajectory, TrajectoryStatus
from rollout_core.teacher_engine import Pair
from rollout_core.teacher_scores import TeacherScores
from trainers.distillation.stream import TeacherStream
from trainers.distillation.teacher import (
    DEFAULT_TEACHER,
    TeacherCheckpoint,
    TeacherConfig,
    TeacherRoster,
    ensure_roster,
)
from trainers.distillation.teacher_set import TeacherSet
from trainers.rollout.samples import GenRequest
from trainers.warmup import WarmupConfig

TOK = build_char_tokenizer("0123456789")


class RecordingTeacher:
    """A TeacherEngine whose every log-prob is `mark`: which teacher scored a pair is read off its scores."""

    def __init__(self, mark: float) -> None:
        self.mark, self.seen, self.busy_s, self.tokens, self.closed = mark, [], 0.0, 0, False

    async def score(self, pairs: Sequence[Pair]) -> list[TeacherScores]:
        self.seen.append([list(r) for _, r in pairs])
        self.tokens += sum(len(p) + len(r) for p, r in pairs)
        return [_scores(len(r), self.mark) for _, r in pairs]

    async def close(self) -> None:
        self.closed = True


def _scores(rows: int, mark: float) -> TeacherScores:
    empty = np.zeros((rows, 0))
    return TeacherScores(
        np.full(rows, mark, np.float32),
        empty.astype(np.int64),
        empty.astype(np.float32),
        empty.astype(bool),
        np.zeros(rows, bool),
        1.0,
    )


def _model_dir(path: Path) -> Path:
    save_pretrained(MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=TOK.vocab_size, num_hidden_layers=1)), path, TOK)
    return path


def _set(named: Sequence[str]) -> tuple[TeacherSet, dict[str, RecordingTeacher]]:
    ckpt = TeacherCheckpoint(Path("/unused"), None, None)
    roster = TeacherRoster(ckpt, dict.fromkeys(named, ckpt))
    engines = {k: RecordingTeacher(-1.0 - i) for i, (k, _) in enumerate(roster.items())}
    return TeacherSet(roster, engines), engines  # type: ignore[arg-type]


def test_each_pair_is_scored_by_its_sources_teacher_and_others_by_the_default_in_order() -> None:
    teachers, engines = _set(["addition"])
    pairs = [([1], [4, 5]), ([1], [6]), ([1], [7, 8, 9]), ([1], [3])]
    sources = ["sort", "addition", "addition", "copy"]
    scores = asyncio.run(teachers.score(pairs, sources))
    assert [s.sampled.tolist() for s in scores] == [[-1.0, -1.0], [-2.0], [-2.0, -2.0, -2.0], [-1.0]]
    assert engines[DEFAULT_TEACHER].seen == [[[4, 5], [3]]] and engines["addition"].seen == [[[6], [7, 8, 9]]]
    assert teachers.tokens == sum(1 + len(r) for _, r in pairs)


def test_adding_a_named_teacher_keeps_the_default_teacher() -> None:
    teachers, engines = _set(["addition", "sort"])
    assert [k for k, _ in teachers.roster.items()] == [DEFAULT_TEACHER, "addition", "sort"]
    asyncio.run(teachers.score([([1], [4])], ["copy"]))
    assert engines[DEFAULT_TEACHER].seen == [[[4]]]
    asyncio.run(teachers.close())
    assert all(e.closed for e in engines.values())


def test_a_teacher_set_without_an_engine_for_every_teacher_is_refused() -> None:
    ckpt = TeacherCheckpoint(Path("/unused"), None, None)
    with pytest.raises(ValueError, match=r"expected an engine for each teacher \['', 'addition'\], got \[''\]"):
        TeacherSet(TeacherRoster(ckpt, {"addition": ckpt}), {DEFAULT_TEACHER: RecordingTeacher(-1.0)})  # type: ignore[dict-item]


def test_the_stream_counts_the_samples_of_each_teacher() -> None:
    teachers, _ = _set(["addition"])
    stream = TeacherStream(teachers)
    requests = [
        GenRequest(f"r{j}", "g", TaskExample("u", src, "12", "3"), 0, j, SamplingParams(max_new_tokens=2))
        for j, src in enumerate(["addition", "addition", "sort"])
    ]
    done = Trajectory(prompt_ids=[1, 4], status=TrajectoryStatus.OK)
    done.response_ids.extend([5, 2])
    asyncio.run(stream.after_group(requests, [done, done, done]))
    assert stream.scores["r0"].sampled.tolist() == [-2.0, -2.0] and stream.scores["r2"].sampled.tolist() == [-1.0] * 2
    metrics = stream.metrics()
    assert metrics["teacher/samples/default"] == 1 and metrics["teacher/samples/addition"] == 2


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ("addition", r"expected SOURCE=DIR entries, got 'addition'"),
        ("=x", r"expected SOURCE=DIR entries"),
        ("addition={missing}", r"teacher.sources addition: expected a model directory with config.json"),
    ],
)
def test_a_malformed_named_teacher_is_refused(tmp_path: Path, entry: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        TeacherConfig(sources=(entry.format(missing=tmp_path / "nope"),))


def test_two_teachers_for_one_source_are_refused(tmp_path: Path) -> None:
    where = _model_dir(tmp_path / "t")
    with pytest.raises(ValueError, match=r"one teacher per data source, got 'sort' twice"):
        TeacherConfig(sources=(f"sort={where}", f"sort={where}"))


def test_a_named_teacher_for_a_source_the_task_lacks_is_refused_before_any_teacher_is_built(tmp_path: Path) -> None:
    where = _model_dir(tmp_path / "t")
    cfg = TeacherConfig(checkpoint=str(where), sources=(f"sort={where}", f"additon={where}"))
    task = ToyTaskConfig(train_size=40, val_size=8).build()
    with pytest.raises(ValueError, match=r"data sources of the task \['addition', 'sort'\], got \['additon'\]"):
        ensure_roster(cfg, task, WarmupConfig(), ModelConfig(), tmp_path / "cache")
    roster = ensure_roster(
        TeacherConfig(checkpoint=str(where), sources=(f"sort={where}",)),
        task,
        WarmupConfig(),
        ModelConfig(),
        tmp_path / "cache",
    )
    assert roster.key_of("sort") == "sort" and roster.key_of("addition") == DEFAULT_TEACHER
    assert not (tmp_path / "cache").exists()  # a given default teacher: nothing built
