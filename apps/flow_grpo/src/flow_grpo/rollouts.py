"""Where the rollouter runs: in this process (`LocalRollouts`) or on a Ray actor (`RayRollouts`). Both keep the
rollouter's calls in the order they were made (a local mailbox; a Ray actor runs one call at a time, in each
caller's order), so the two give the same batches for the same settings.

The pipeline (`loop.py`) submits step s's batch right after pushing the weights it may be sampled with; `take(s)`
waits for it.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Protocol

from recipes.weight_sync import LocalWeightSync, RayWeightSync, WeightHandle

from flow_grpo.batch import RolloutBatch
from flow_grpo.rollouter import FlowRollouter, RollouterSpec


class Rollouts(Protocol):
    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle: ...

    def push(self, handle: WeightHandle) -> None: ...

    def submit(self, step: int) -> None: ...

    def take(self, step: int) -> tuple[RolloutBatch, float]:
        """The step's batch and the seconds spent waiting for it."""
        ...

    def close(self) -> None: ...


class LocalRollouts:
    """Calls are queued and run when a batch is taken (so their order, not their timing, decides the result)."""

    def __init__(self, spec: RollouterSpec) -> None:
        self.sync = LocalWeightSync()
        self.rollouter = FlowRollouter(spec, self.sync)
        self.mailbox: deque[tuple[str, Any]] = deque()

    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle:
        return self.sync.publish(weights, version)

    def push(self, handle: WeightHandle) -> None:
        self.mailbox.append(("weights", handle))

    def submit(self, step: int) -> None:
        self.mailbox.append(("generate", step))

    def take(self, step: int) -> tuple[RolloutBatch, float]:
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


class RayRollouts:
    """One rollouter actor in the session's rollouter bundle; weights go through the object store."""

    def __init__(self, spec: RollouterSpec, options: dict[str, Any], timeout_s: float) -> None:
        import ray

        self.ray = ray
        self.sync = RayWeightSync()
        actor_cls = ray.remote(FlowRollouter)
        self.actor = actor_cls.options(**options).remote(ray.put(spec), self.sync)  # type: ignore[attr-defined]
        self.pending: dict[int, Any] = {}
        self.timeout_s = timeout_s

    def publish(self, weights: dict[str, Any], version: int) -> WeightHandle:
        return self.sync.publish(weights, version)

    def push(self, handle: WeightHandle) -> None:
        self.actor.set_weights.remote(handle)

    def submit(self, step: int) -> None:
        self.pending[step] = self.actor.generate.remote(step)

    def take(self, step: int) -> tuple[RolloutBatch, float]:
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
