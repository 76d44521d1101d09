"""The distillation teacher in a run: each finished group is scored while others still generate, an ok sample
never leaves without its teacher's scores, and a teacher that cannot score the run fails before training with
got/expected (tokenizer, context, top-k, temperature)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from engine_adapters.vllm.teacher_engine import teacher_server_config
from moe_models import MoEConfig, MoEForCausalLM, build_char_tokenizer, save_pretrained
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rollout_core import SamplingParams, Trajectory, TrajectoryStatus
from rollout_core.teacher_engine import NativeTeacherEngineConfig, TeacherSite, VLLMTeacherEngineConfig
from rollout_core.testing import ScriptedEngine
from run_lifecycle.cli import app_parser, resolve_run
from trainers.distillation.stream import TeacherStream, attach_teacher
from trainers.distillation.teacher import (
    DEFAULT_TEACHER,
    TeacherCheckpoint,
    TeacherConfig,
    TeacherRoster,
    check_teacher,
)
from trainers.distillation.teacher_set import TeacherSet
from trainers.recipe.config import RecipeConfig
from trainers.rollout.rollout import generate_all
from trainers.rollout.samples import GenRequest, SampleStatus, ScoredSample

TOK = build_char_tokenizer("0123456789")
torch.set_num_threads(1)


RUNS_ROOT = Path("runs") / "rl-run-test"


def parse(argv: list[str]) -> tuple[RecipeConfig, bool]:
    """The shared sections resolved and checked as an app's command line does (`run_lifecycle.cli`)."""
    return resolve_run(RecipeConfig, app_parser("rl-run-test", "", RecipeConfig, RUNS_ROOT).parse_args(argv), RUNS_ROOT)


def _model(vocab: int = TOK.vocab_size, context: int = 64) -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(
        MoEConfig.preset("tiny", vocab_size=vocab, num_hidden_layers=1, max_position_embeddings=context)
    )


def _requests(lengths: dict[str, int]) -> list[GenRequest]:
    out = []
    for g, (group, n) in enumerate(lengths.items()):
        for j in range(2):
            example = TaskExample(f"u{g}", "toy", "12", "21")
            params = SamplingParams(max_new_tokens=n, seed=10 * g + j)
            out.append(GenRequest(f"{group}-r{j}", group, example, g, j, params))
    return out


def test_generate_all_hands_each_group_over_as_soon_as_it_finishes() -> None:
    # eos outside the vocabulary: every call runs to its budget, so "long" is still generating when "short" ends
    engine = ScriptedEngine(vocab_size=TOK.vocab_size, eos_token_id=999, stop_prob=0.0, token_delay=0.002)
    running_at_hand_over: dict[str, set[str]] = {}

    async def after_group(requests, trajectories) -> None:  # type: ignore[no-untyped-def]
        assert {r.group_id for r in requests} == {requests[0].group_id} and len(trajectories) == 2
        running_at_hand_over[requests[0].group_id] = set(engine.running)

    requests = _requests({"short": 2, "long": 40})
    never_stops = build_char_tokenizer("0123456789")
    never_stops.stop_ids = (999,)  # the renderer's stop ids join every request's: none the engine emits either
    trajectories = asyncio.run(generate_all(engine, Renderer(never_stops, "plain"), requests, after_group=after_group))
    assert running_at_hand_over == {"short": {"long-r0", "long-r1"}, "long": set()}
    assert [len(t.response_ids) for t in trajectories] == [2, 2, 40, 40]  # request order kept


def test_the_stream_scores_every_ok_trajectory_of_a_group_and_skips_the_others(tmp_path: Path) -> None:
    save_pretrained(_model(), tmp_path / "teacher", TOK)
    site = TeacherSite(str(tmp_path / "teacher"), 1.0, 0, 64, str(tmp_path / "work"))
    requests = _requests({"g": 3})
    ok = Trajectory(prompt_ids=[1, 4, 5], status=TrajectoryStatus.OK)
    ok.response_ids.extend([6, 7, 2])
    failed = Trajectory(prompt_ids=[1, 4, 5], status=TrajectoryStatus.ERROR, error="boom")

    async def main() -> TeacherStream:
        teacher = await NativeTeacherEngineConfig().build(site)
        roster = TeacherRoster(TeacherCheckpoint(tmp_path / "teacher", None, None))
        stream = TeacherStream(TeacherSet(roster, {DEFAULT_TEACHER: teacher}))
        await stream.after_group(requests, [ok, failed])
        await teacher.close()
        return stream

    stream = asyncio.run(main())
    assert set(stream.scores) == {"g-r0"} and stream.scores["g-r0"].num_rows == 3
    metrics = stream.metrics()
    assert metrics["teacher/score_s"] > 0 and metrics["teacher/tokens_per_s"] > 0
    assert metrics["teacher/samples/default"] == 1


def _scored(uid: str, status: SampleStatus) -> ScoredSample:
    example = TaskExample(uid, "toy", "12", "21")
    request = GenRequest(uid, "g", example, 0, 0, SamplingParams(max_new_tokens=2))
    traj = Trajectory(prompt_ids=[1], status=TrajectoryStatus.OK)
    return ScoredSample(request, traj, "", None, status)


def test_an_ok_sample_without_teacher_scores_is_an_error_and_others_pass_unscored() -> None:
    samples = [_scored("a", SampleStatus.OK), _scored("b", SampleStatus.NOT_OK)]
    with pytest.raises(ValueError, match=r"none for 1 \(\['a'\]\)"):
        attach_teacher(samples, {})


def _teacher_dir(tmp_path: Path, *, tokenizer=TOK, vocab: int = TOK.vocab_size, context: int = 64) -> TeacherCheckpoint:  # type: ignore[no-untyped-def]
    save_pretrained(_model(vocab, context), tmp_path / "teacher", tokenizer)
    return TeacherCheckpoint(tmp_path / "teacher", None, None)


def test_a_teacher_with_another_tokenizer_is_refused(tmp_path: Path) -> None:
    other = build_char_tokenizer("0123456789+")
    where = _teacher_dir(tmp_path, tokenizer=other, vocab=other.vocab_size)
    with pytest.raises(ValueError, match=r"expected the student's tokenizer.*only the teacher has: \['\+'\]"):
        check_teacher(TeacherConfig(), where, TOK, max_len=10)


def test_a_teacher_context_shorter_than_the_longest_sequence_is_refused(tmp_path: Path) -> None:
    where = _teacher_dir(tmp_path, context=16)
    check_teacher(TeacherConfig(), where, TOK, max_len=16)
    with pytest.raises(ValueError, match=r"longest sequence .* is 17 tokens.*got max_position_embeddings 16"):
        check_teacher(TeacherConfig(), where, TOK, max_len=17)


def test_a_top_k_beyond_the_teacher_vocabulary_is_refused(tmp_path: Path) -> None:
    where = _teacher_dir(tmp_path)
    with pytest.raises(ValueError, match=f"teacher.top_k: expected at most the teacher's vocabulary {TOK.vocab_size}"):
        check_teacher(TeacherConfig(top_k=TOK.vocab_size + 1), where, TOK, max_len=10)


def test_a_teacher_temperature_other_than_the_rollout_temperature_fails_at_parse_time(tmp_path: Path) -> None:
    base = ["--algorithm.kind", "opd", "--run.dir", str(tmp_path / "run")]
    with pytest.raises(ValueError, match=r"teacher.temperature: expected .* rollout.temperature 0.7, got 1.0"):
        parse([*base, "--rollout.temperature", "0.7"])
    cfg, _ = parse([*base, "--rollout.temperature", "0.7", "--teacher.temperature", "0.7"])
    assert cfg.teacher.temperature == 0.7 and not (tmp_path / "run").exists()
    parse(["--rollout.temperature", "0.7", "--run.dir", str(tmp_path / "run")])  # not read without opd


def test_a_missing_teacher_checkpoint_fails_at_parse_time(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"teacher.checkpoint: expected a model directory with config.json"):
        parse(["--algorithm.kind", "opd", "--teacher.checkpoint", str(tmp_path / "nope")])


def test_the_top_k_forward_kl_without_a_teacher_top_k_fails_at_parse_time(tmp_path: Path) -> None:
    base = ["--algorithm.kind", "opd", "--algorithm.loss", "topk_fkl", "--run.dir", str(tmp_path / "run")]
    with pytest.raises(ValueError, match=r"algorithm.loss topk_fkl: expected teacher.top_k > 0"):
        parse(base)
    cfg, _ = parse([*base, "--teacher.top_k", "4"])
    assert cfg.teacher.top_k == 4


def test_a_vllm_teacher_below_temperature_1_fails_at_parse_time(tmp_path: Path) -> None:
    flags = ["--algorithm.kind", "opd", "--teacher.engine", "vllm", "--run.dir", str(tmp_path / "run")]
    with pytest.raises(ValueError, match=r"teacher.engine vllm: vLLM's prompt log-probs are at temperature 1"):
        parse([*flags, "--rollout.temperature", "0.7", "--teacher.temperature", "0.7"])
    assert parse(flags)[0].teacher.engine.kind == "vllm"


@pytest.mark.parametrize(("top_k", "allowed"), [(0, "20"), (3, "20"), (64, "64")])
def test_a_vllm_teacher_server_allows_the_top_k_it_is_asked_for(tmp_path: Path, top_k: int, allowed: str) -> None:
    # vLLM refuses prompt_logprobs above its --max-logprobs (default 20): the launched server is told top_k
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_moe"}')
    site = TeacherSite(str(tmp_path), 1.0, top_k, 64, str(tmp_path / "work"))
    command = teacher_server_config(VLLMTeacherEngineConfig(python="/nope/python"), site).command(port=1)
    assert command[command.index("--max-logprobs") + 1] == allowed and command[0] == "/nope/python"
