"""A NaN loss inside a real run (sync_ppo): the run stops at once with an error naming the step and the metric,
before the bad optimiser step: the weights and optimiser state are untouched, no checkpoint of the bad step is
written, and `--resume` continues from the last complete checkpoint."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from faults_apps import app_flags, resume_flags
from faults_tally import FaultTally
from run_lifecycle import RunDir, read_metrics
from sync_ppo.cli import parse
from trainers import step_runner
from trainers.algorithm import Algorithm, LossInputs, LossOutputs
from trainers.backend import TrainingBackend
from trainers.step_metrics import NonFiniteError
from trainers.sync_ppo.trainer import train

pytestmark = pytest.mark.faults

FAULTY_STEP = 3


@dataclass
class NaNLoss:
    """The run's algorithm, whose loss is NaN (as after a diverged log-ratio)."""

    inner: Algorithm

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def loss(self, inputs: LossInputs) -> LossOutputs:
        out = self.inner.loss(inputs)
        return LossOutputs(out.loss * float("nan"), out.means, out.sums, out.maxima)


def _snapshot(backend: TrainingBackend) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in backend.state_dict().tensors.items() if not k.startswith("rng.")}


def test_a_nan_loss_stops_the_run_naming_the_step_with_the_weights_untouched_and_resume_continues(
    tmp_path: Path, warmup_cache: Path, monkeypatch: pytest.MonkeyPatch, tally: FaultTally
) -> None:
    real_step = step_runner.train_step
    seen: dict[str, object] = {}

    def faulty_step(backend: TrainingBackend, algorithm: Algorithm, *args: object, **kw: object) -> object:
        if backend.version == FAULTY_STEP - 1:
            seen["backend"], seen["before"] = backend, _snapshot(backend)
            algorithm = NaNLoss(algorithm)  # type: ignore[assignment]
        return real_step(backend, algorithm, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(step_runner, "train_step", faulty_step)  # where LocalSteps runs the step
    run = tmp_path / "run"
    cfg, _ = parse(app_flags(run, warmup_cache, "--run.steps", "4", "--run.checkpoint_every", "1"))
    with pytest.raises(NonFiniteError) as err:
        train(cfg)
    tally.schedule(faults=1)
    tally.note(f"injected: a NaN loss at step {FAULTY_STEP}; the run stopped with: {err.value}")
    tally.check(err.value.step == FAULTY_STEP and err.value.metric == "actor/loss", f"error names {err.value}")
    tally.check(f"step {FAULTY_STEP}" in str(err.value) and "actor/loss is nan" in str(err.value), str(err.value))
    after = _snapshot(seen["backend"])  # type: ignore[arg-type]
    before: dict[str, torch.Tensor] = seen["before"]  # type: ignore[assignment]
    tally.check(
        after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items()),
        "the weights or optimiser moments changed on the NaN step",
    )
    rd = RunDir(run)
    tally.check([int(p.name) for p in rd.complete_checkpoints()] == [1, 2], "a checkpoint of the NaN step exists")
    tally.check(rd.stale_checkpoints() == [], "a staging folder was left by the stopped run")
    tally.check([r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1, 2], "metrics of the NaN step")

    monkeypatch.undo()
    cfg, resume = parse(resume_flags(run))
    train(cfg, resume=resume)
    rows = read_metrics(run / "metrics.jsonl")
    tally.check([r["step"] for r in rows] == [0, 1, 2, 3, 4], f"resumed rows {[r['step'] for r in rows]}")
    tally.check(all(math.isfinite(r["actor/pg_loss"]) for r in rows[1:]), "a non-finite loss after the resume")
    tally.check(rd.latest_checkpoint() == rd.checkpoint(4), "the resumed run did not reach its last checkpoint")
