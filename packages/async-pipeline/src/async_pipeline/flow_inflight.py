"""InFlight: the rollouter, in this process or on a Ray actor (`async_pipeline.transport`), and the batches between it
and the trainer, by step: submitted (being sampled) or ready (taken early or restored from a checkpoint, not trained
yet). A checkpoint holds every one of them (`pending/<step>.npz`), so a resumed run trains them as they were
sampled: none is lost or sampled again.

Step s is submitted once, and only for s <= `last_step`; a step that is ready is never submitted again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainers.flow.batch import RolloutBatch

from async_pipeline.flow_rollouter import FlowRollouterSpec
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.transport import LocalRollouts, RayRollouts, Rollouts

PENDING = "pending"  # checkpoints/<step>/pending/<s>.npz: batches submitted but not trained at the checkpoint


@dataclass
class InFlight:
    rollouts: Rollouts[RolloutBatch]
    last_step: int  # the run's last step: nothing beyond it is sampled
    session: object | None = None  # async_pipeline.ray_session.session.RaySession when the rollouter is a Ray actor
    ready: dict[int, RolloutBatch] = field(default_factory=dict)
    submitted: set[int] = field(default_factory=set)

    @classmethod
    def open(cls, spec: FlowRollouterSpec, last_step: int, ray: RayConfig | None) -> InFlight:
        """A rollouter built from `spec` in this process (`ray` None) or on one actor of a Ray session it opens."""
        if ray is None:
            return cls(LocalRollouts(spec), last_step)
        from run_lifecycle.sigterm import exit_on_sigterm

        from async_pipeline.ray_session.session import RaySession

        session = RaySession.open(ray, app="flow_grpo")
        exit_on_sigterm()  # ray.init installs its own SIGTERM handler
        try:
            return cls(RayRollouts(spec, session.rollouter_options(0), ray.call_timeout_s), last_step, session)
        except BaseException:
            session.close()
            raise

    def close(self) -> None:
        try:
            self.rollouts.close()
        finally:
            if self.session is not None:
                self.session.close()  # type: ignore[attr-defined]

    def push_weights(self, weights: dict[str, object], version: int) -> None:
        self.rollouts.push(self.rollouts.publish(weights, version))

    def submit(self, step: int) -> None:
        if step <= self.last_step and step not in self.ready and step not in self.submitted:
            self.rollouts.submit(step)
            self.submitted.add(step)

    def take(self, step: int) -> tuple[RolloutBatch, float]:
        """Step `step`'s batch and the seconds spent waiting for it (0 when it was ready)."""
        if step in self.ready:
            return self.ready.pop(step), 0.0
        self.submitted.discard(step)
        return self.rollouts.take(step)

    def save(self, folder: Path) -> None:
        """Takes every submitted batch first, then writes all of them to `folder/pending/`."""
        for pending in sorted(self.submitted):
            self.ready[pending] = self.rollouts.take(pending)[0]
        self.submitted.clear()
        (folder / PENDING).mkdir()
        for batch in self.ready.values():
            batch.save(folder / PENDING / f"{batch.step}.npz")

    def restore(self, folder: Path) -> None:
        """The batches a checkpoint saved (those past `last_step` dropped: a resume may shorten the run)."""
        pending = (RolloutBatch.load(p) for p in sorted((folder / PENDING).glob("*.npz")))
        self.ready = {b.step: b for b in pending if b.step <= self.last_step}
