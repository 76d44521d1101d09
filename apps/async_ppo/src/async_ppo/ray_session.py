"""RaySession: a local Ray (dashboard off, a temp dir of our own) or an attached cluster, and the placement group
that reserves the trainer's and every rollouter's resources up front.

Reserving everything at start turns "the cluster is too small" into an immediate error that names what is
missing, instead of an actor that waits forever for a CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # else every Ray worker rebuilds the uv venv

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from async_ppo.config import RayConfig

TRAINER_BUNDLE = 0


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    out = {"CPU": cpus}
    if gpus > 0:
        out["GPU"] = gpus
    return out


@dataclass
class RaySession:
    cfg: RayConfig
    group: PlacementGroup
    started_here: bool

    @classmethod
    def open(cls, cfg: RayConfig) -> RaySession:
        started_here = not ray.is_initialized()
        if started_here:
            if cfg.address:
                ray.init(address=cfg.address, log_to_driver=True)
            else:
                temp = cfg.temp_dir or f"/tmp/async_ppo_ray_{os.getpid()}"
                ray.init(include_dashboard=False, _temp_dir=temp, log_to_driver=True, configure_logging=False)
        bundles = [_bundle(cfg.trainer_cpus, cfg.trainer_gpus)]
        bundles += [_bundle(cfg.rollouter_cpus, cfg.rollouter_gpus) for _ in range(cfg.num_rollouters)]
        group = placement_group(bundles, strategy="PACK")
        try:
            ray.get(group.ready(), timeout=cfg.startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            have = ray.cluster_resources()
            if started_here:
                ray.shutdown()
            raise RuntimeError(
                f"Ray could not reserve {bundles} (trainer, then one bundle per rollouter) within "
                f"{cfg.startup_timeout_s:.0f} s; the cluster has {have}."
                " Lower ray.rollouter_cpus / ray.trainer_cpus / ray.num_rollouters or add nodes"
            ) from None
        return cls(cfg, group, started_here)

    def trainer_options(self) -> dict[str, Any]:
        return self._options(TRAINER_BUNDLE, self.cfg.trainer_cpus, self.cfg.trainer_gpus)

    def rollouter_options(self, rollouter_id: int) -> dict[str, Any]:
        return self._options(1 + rollouter_id, self.cfg.rollouter_cpus, self.cfg.rollouter_gpus)

    def _options(self, bundle: int, cpus: float, gpus: float) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
        return {"num_cpus": cpus, "num_gpus": gpus, "scheduling_strategy": strategy, "max_restarts": 0}

    @staticmethod
    def light_options() -> dict[str, Any]:
        """The broker and the validator: no reserved CPU (they wait most of the time)."""
        return {"num_cpus": 0, "max_restarts": 0}

    def close(self) -> None:
        remove_placement_group(self.group)
        if self.started_here:
            ray.shutdown()
