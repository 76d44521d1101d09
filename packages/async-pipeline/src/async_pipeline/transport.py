"""Where a step rollouter runs: in this process (`LocalRollouts`) or on one Ray actor (`RayRollouts`). Both keep the
rollouter's calls in the order they were made (a local mailbox; a Ray actor runs one call at a time, in each
caller's order), so the two give the same batches for the same settings.

A step rollouter is one whose batch is a pure function of the weights it was last sent and the step (FlowGRPO's
`async_pipeline.flow_rollouter.FlowRollouter`). The loop submits step s's batch right after pushing the weights it may
be sampled with; `take(s)` waits for it. Generic over the batch type `B`: the app keeps its own sample record.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Generic, Protocol, TypeVar

from trainers.weight_sync import LocalWeightSync, WeightHandle, WeightSync

from async_pipeline.ray_session.weight_sync import RayWeightSync

B = TypeVar("B")
B_co = TypeVar("B_co", covariant=True)


class StepRollouter(Protocol[B_co]):
    """Loads the weights it is sent; samples one step's batch with the weights it holds."""

    def set_weights(self, handle: WeightHandle) -> int: ...

    def generate(self, step: int) -> B_co: ...


class StepRollouterSpec(Protocol[B_co]):
    """What a step rollouter is built from (picklable: it travels to the actor through Ray's object store)."""

    def build(self, sync: WeightSync) -> StepRollouter[B_co]: ...


class Rollouts(Protocol[B]):
    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle: ...

    def push(self, handle: WeightHandle) -> None: ...

    def submit(self, step: int) -> None: ...

    def take(self, step: int) -> tuple[B, float]:
        """The step's batch and the seconds spent waiting for it."""
        ...

    def close(self) -> None: ...


class LocalRollouts(Generic[B]):
    """Calls are queued and run when a batch is taken (so their order, not their timing, decides the result)."""

    def __init__(self, spec: StepRollouterSpec[B]) -> None:
        self.sync = LocalWeightSync()
        self.rollouter = spec.build(self.sync)
        self.mailbox: deque[tuple[str, Any]] = deque()

    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle:
        return self.sync.publish(weights, version)

    def push(self, handle: WeightHandle) -> None:
        self.mailbox.append(("weights", handle))

    def submit(self, step: int) -> None:
        self.mailbox.append(("generate", step))

    def take(self, step: int) -> tuple[B, float]:
        t0 = time.perf_counter()
        while self.mailbox:
            kind, arg = self.mailbox.popleft()
            if kind == "weights":
                self.rollouter.set_weights(arg)
                continue
            batch = self.rollouter.generate(arg)
            if arg == step:
                return batch, time.perf_counter() - t0
            raise RuntimeError(f"LocalRollouts.take({step}): the next submitted step is {arg}; expected {step}")
        raise RuntimeError(f"LocalRollouts.take({step}): expected the step to be submitted, got nothing queued")

    def close(self) -> None:
        self.mailbox.clear()


class StepActor(Generic[B]):
    """The Ray actor of `RayRollouts`: the rollouter its spec builds, behind the same two calls."""

    def __init__(self, spec: StepRollouterSpec[B], sync: WeightSync) -> None:
        self.rollouter = spec.build(sync)

    def set_weights(self, handle: WeightHandle) -> int:
        return self.rollouter.set_weights(handle)

    def generate(self, step: int) -> B:
        return self.rollouter.generate(step)


class RayRollouts(Generic[B]):
    """One rollouter actor in the session's rollouter bundle; weights go through the object store."""

    def __init__(self, spec: StepRollouterSpec[B], options: dict[str, Any], timeout_s: float) -> None:
        import ray

        self.ray = ray
        self.sync = RayWeightSync()
        actor_cls = ray.remote(StepActor)
        self.actor = actor_cls.options(**options).remote(ray.put(spec), self.sync)  # type: ignore[attr-defined]
        self.pending: dict[int, Any] = {}
        self.timeout_s = timeout_s

    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle:
        return self.sync.publish(weights, version)

    def push(self, handle: WeightHandle) -> None:
        self.actor.set_weights.remote(handle)

    def submit(self, step: int) -> None:
        self.pending[step] = self.actor.generate.remote(step)

    def take(self, step: int) -> tuple[B, float]:
        if step not in self.pending:
            raise RuntimeError(
                f"RayRollouts.take({step}): expected the step to be submitted, got {sorted(self.pending)}"
            )
        t0 = time.perf_counter()
        batch = self.ray.get(self.pending.pop(step), timeout=self.timeout_s)
        return batch, time.perf_counter() - t0

    def close(self) -> None:
        self.ray.kill(self.actor)
        self.pending.clear()
