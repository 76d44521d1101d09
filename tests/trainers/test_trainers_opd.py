"""On-policy distillation (`algorithm.kind opd`): the pg advantage is the clamped teacher-student log-ratio of the
sampled token, k2 / k3 are supervised reverse-KL terms with hand-checked values and gradients, the task reward mixes
in by its coefficient, teacher log-probs ride the batch on the shifted grid, and nothing trains without them."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from rollout_core.teacher_scores import TeacherScores
from trainers import TrainBatch, TrainSample, collate, pad_to_multiple
from trainers.algorithm import KLConfig, LossInputs, OPDConfig
from trainers_fixtures import PAD, algorithm, backend, grads, rollouts, step, tiny_model

torch.set_num_threads(1)


def _scores(
    sampled: list[float], top_ids: list[list[int]] | None = None, top_lp: list[list[float]] | None = None
) -> TeacherScores:
    r, k = len(sampled), len(top_ids[0]) if top_ids else 0
    ids = np.asarray(top_ids if top_ids else np.zeros((r, 0)), dtype=np.int64)
    return TeacherScores(
        sampled=np.asarray(sampled, dtype=np.float32),
        ids=ids,
        logprobs=np.asarray(top_lp if top_lp else np.zeros((r, 0)), dtype=np.float32),
        valid=np.ones((r, k), dtype=bool),
        in_top_k=np.zeros(r, dtype=bool),
        temperature=1.0,
    )


def _with_teacher(samples: list[TrainSample], shift: float = 0.5) -> list[TrainSample]:
    """The teacher agrees with the rollout up to `-shift` on every token, `-shift * j` on token j (a known ratio)."""
    return [
        dataclasses.replace(s, teacher=_scores([lp - shift * j for j, lp in enumerate(s.rollout_log_probs)]))
        for s in samples
    ]


def _batch(shift: float = 0.5, pad_to: int = 1) -> TrainBatch:
    samples = pad_to_multiple(_with_teacher(rollouts(tiny_model()), shift), pad_to, pad_token_id=PAD)
    return collate(samples, PAD)


def test_collate_puts_teacher_log_probs_on_the_shifted_grid_and_pads_get_zero() -> None:
    samples = _with_teacher(rollouts(tiny_model(), num_prompts=2, per_prompt=1))
    batch = collate(pad_to_multiple(samples, 4, pad_token_id=PAD), PAD)
    assert batch.teacher_log_probs is not None
    for b, s in enumerate(samples):
        p = len(s.prompt_ids)
        got = batch.teacher_log_probs[b, p - 1 : p - 1 + len(s.response_ids)].tolist()
        assert s.teacher is not None and got == pytest.approx(s.teacher.sampled.tolist())
        assert float(batch.teacher_log_probs[b, : p - 1].abs().sum()) == 0.0
    assert float(batch.teacher_log_probs[batch.is_padding].abs().sum()) == 0.0


def test_a_real_sample_without_teacher_scores_is_refused_when_others_have_them() -> None:
    samples = rollouts(tiny_model(), num_prompts=2, per_prompt=1)
    mixed = [*_with_teacher(samples[:1]), samples[1]]
    with pytest.raises(ValueError, match="never trained without its teacher's scores"):
        collate(mixed, PAD)


def test_teacher_scores_with_the_wrong_number_of_rows_are_refused() -> None:
    (s,) = rollouts(tiny_model(), num_prompts=1, per_prompt=1)
    with pytest.raises(ValueError, match=r"TrainSample.teacher: expected"):
        dataclasses.replace(s, teacher=_scores([0.0] * (len(s.response_ids) + 1)))


def test_pg_advantage_is_the_clamped_teacher_minus_student_log_ratio() -> None:
    batch = _batch(shift=0.5)
    alg = algorithm("opd", log_ratio_clamp=1.2)
    adv = alg.advantages(batch, None, batch.teacher_log_probs)
    expected = (batch.teacher_log_probs - batch.rollout_log_probs).clamp(-1.2, 1.2) * batch.response_mask
    torch.testing.assert_close(adv.tokens, expected)
    # token j has log-ratio -0.5 j: tokens 3.. (-1.5, -2.0, ...) hit the clamp
    m = batch.response_mask > 0
    ratio = (batch.teacher_log_probs - batch.rollout_log_probs)[m]
    assert float(adv.metrics["opd/clamped_frac"]) == pytest.approx(float((ratio.abs() > 1.2).float().mean()))
    assert float(adv.metrics["opd/reverse_kl"]) == pytest.approx(float(-ratio.mean()), rel=1e-5)


def test_the_reward_advantage_adds_by_its_coefficient() -> None:
    batch = _batch()
    plain = algorithm("opd").advantages(batch, None, batch.teacher_log_probs).tokens
    reward = algorithm("ppo").advantages(batch, None, None).tokens
    mixed = algorithm("opd", reward_coef=0.3).advantages(batch, None, batch.teacher_log_probs).tokens
    torch.testing.assert_close(mixed, plain + 0.3 * reward)


@pytest.mark.parametrize(
    ("loss", "value"),
    [
        ("k2", lambda r: 0.5 * r**2),
        ("k3", lambda r: math.exp(-r) + r - 1),
    ],
)
def test_k2_and_k3_losses_match_hand_values_and_pull_the_student_toward_the_teacher(loss: str, value) -> None:
    student = torch.tensor([[-0.2, -1.0, -3.0]], requires_grad=True)
    teacher = torch.tensor([[-0.7, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0]])
    alg = algorithm("opd", loss=loss)
    out = alg.loss(
        LossInputs(
            log_probs=student,
            old_log_probs=student.detach(),
            rollout_log_probs=student.detach(),
            advantages=torch.zeros(1, 3),
            mask=mask,
            num_tokens=3.0,
            num_seqs=1.0,
            ref_log_probs=teacher,
        )
    )
    r = (student.detach() - teacher)[0].tolist()  # log pi_S - log pi_T
    assert float(out.loss.detach()) == pytest.approx(sum(value(x) for x in r) / 3, rel=1e-5)
    out.loss.backward()
    g = student.grad[0].tolist()
    assert g[0] > 0 and g[1] == pytest.approx(0.0, abs=1e-7) and g[2] < 0  # descent lowers 0, raises 2
    assert "opd/kl_loss" in out.sums


def test_k1_and_a_reference_kl_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"k1.*never sees the teacher"):
        OPDConfig(loss="k1")
    with pytest.raises(ValueError, match=r"algorithm.kl.coef: on-policy distillation"):
        OPDConfig(kl=KLConfig(coef=0.1))


def test_a_batch_without_teacher_log_probs_is_never_trained_by_opd() -> None:
    model = tiny_model()
    batch = collate(rollouts(model), PAD)
    with pytest.raises(ValueError, match="expected a batch with teacher log-probs, got none"):
        step(backend(model), batch, algorithm("opd"))
    assert backend(model).version == 0


@pytest.mark.parametrize("loss", ["pg", "k2", "k3"])
def test_an_opd_step_trains_and_a_teacher_equal_to_the_student_gives_no_gradient(loss: str) -> None:
    model = tiny_model()
    same = _batch(shift=0.0)  # teacher == rollout == the model: d = 0 on every token
    metrics = step(backend(model, grad_clip=1e9), same, algorithm("opd", loss=loss)).metrics
    assert metrics["opd/reverse_kl"] == pytest.approx(0.0, abs=1e-6)
    assert max(float(g.abs().max()) for g in grads(model).values()) < 1e-5
    model = tiny_model()
    metrics = step(backend(model, grad_clip=1e9), _batch(shift=0.5), algorithm("opd", loss=loss)).metrics
    assert metrics["opd/reverse_kl"] > 0.1
    assert max(float(g.abs().max()) for g in grads(model).values()) > 1e-4


def test_top_k_forward_kl_matches_hand_values_and_pushes_up_the_teachers_choice() -> None:
    # one position, teacher top-2 ids {3, 5} with probabilities 0.6 / 0.2 (renormalised: 0.75 / 0.25)
    student = torch.log(torch.tensor([[[0.1, 0.5]]])).requires_grad_(True)  # log pi_theta at ids 3, 5
    teacher = (torch.log(torch.tensor([[[0.6, 0.2]]])), torch.ones(1, 1, 2, dtype=torch.bool))
    lp = torch.tensor([[-1.0]], requires_grad=True)
    alg = algorithm("opd", loss="topk_fkl")
    out = alg.loss(
        LossInputs(
            log_probs=lp,
            old_log_probs=lp.detach(),
            rollout_log_probs=lp.detach(),
            advantages=torch.zeros(1, 1),
            mask=torch.ones(1, 1),
            num_tokens=1.0,
            num_seqs=1.0,
            ref_log_probs=torch.zeros(1, 1),
            top_k_log_probs=student,
            teacher_top_k=teacher,
        )
    )
    expected = 0.75 * math.log(0.75 / 0.1) + 0.25 * math.log(0.25 / 0.5)
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert float(out.means["opd/student_top_k_mass"]) == pytest.approx(0.6, rel=1e-5)
    out.loss.backward()
    assert student.grad is not None and student.grad[0, 0].tolist() == pytest.approx([-0.75, -0.25])


def test_an_invalid_top_k_entry_is_left_out_of_the_target() -> None:
    student = torch.log(torch.tensor([[[0.1, 0.5]]]))
    teacher = (torch.log(torch.tensor([[[0.6, 0.2]]])), torch.tensor([[[True, False]]]))
    out = algorithm("opd", loss="topk_fkl").loss(
        LossInputs(
            log_probs=torch.zeros(1, 1),
            old_log_probs=torch.zeros(1, 1),
            rollout_log_probs=torch.zeros(1, 1),
            advantages=torch.zeros(1, 1),
            mask=torch.ones(1, 1),
            num_tokens=1.0,
            num_seqs=1.0,
            ref_log_probs=torch.zeros(1, 1),
            top_k_log_probs=student,
            teacher_top_k=teacher,
        )
    )
    assert float(out.loss) == pytest.approx(math.log(1 / 0.1), rel=1e-5)  # q = (1, 0)


def test_a_top_k_step_reads_the_students_log_probs_of_the_teachers_ids_from_the_same_forward() -> None:
    model = tiny_model()
    samples = rollouts(model, num_prompts=2, per_prompt=2)
    with_top = []
    for s in samples:  # the teacher is the model itself: its top-2 at each response row
        seq = torch.tensor([[*s.prompt_ids, *s.response_ids]])
        with torch.no_grad():
            rows = torch.log_softmax(model(seq).logits[0, len(s.prompt_ids) - 1 : -1].float(), dim=-1)
        top = rows.topk(2)
        with_top.append(
            dataclasses.replace(s, teacher=_scores(s.rollout_log_probs, top.indices.tolist(), top.values.tolist()))
        )
    batch = collate(with_top, PAD)
    assert batch.teacher_top_ids is not None and batch.teacher_top_ids.shape[-1] == 2
    metrics = step(backend(model), batch, algorithm("opd", loss="topk_fkl")).metrics
    # before the update the student is the teacher: its mass on the top-2 is the teacher's own
    mass = [float(t.exp().sum(-1).mean()) for t in [batch.teacher_top_log_probs[batch.teacher_top_valid.any(-1)]]]
    assert metrics["opd/student_top_k_mass"] == pytest.approx(mass[0], rel=1e-4)
    assert metrics["opd/fkl_loss"] > 0  # the renormalised top-2 is sharper than the student's full distribution
