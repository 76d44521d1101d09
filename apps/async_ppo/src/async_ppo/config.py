"""AsyncConfig: every knob of an async PPO run (no torch or ray imported here, so `--help` is instant).

The shared sections (run, task, warmup, rollout, algorithm, train, optim, backend, validation) are every trainer
app's (`recipes.config.RecipeConfig`), so a config that runs one trainer runs the other; this app adds pipeline,
ray and faults. Defaults: one rollouter and one trainer on their own core each, max_staleness 1 (the rollouter
generates step s + 1 while the trainer trains step s), weights pushed after every update with pause `keep`
(in-flight responses continue under the new weights, each token tagged with its version).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from recipes.config import RecipeConfig


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass
class PipelineConfig:
    max_staleness: int = _help(
        "max age in weight versions of the oldest token of a trained sample (0: synchronous training)", 1
    )
    sync_every: int = _help("push weights to the rollouters after every k trainer steps", 1)
    pause_mode: Literal["keep", "abort"] = _help(
        "weight push: `keep` freezes in-flight responses and continues them under the new weights; `abort` "
        "ends their engine calls and resumes them with prompt + tokens so far (partial rollout)",
        "keep",
    )
    partial_rollout: bool = _help("with pause_mode abort: resume aborted responses (false: drop them, counted)", True)
    bucket_mb: float = _help("weights travel trainer -> engines in buckets of at most this many MiB", 256.0)

    def __post_init__(self) -> None:
        if self.max_staleness < 0 or self.sync_every < 1:
            raise ValueError(
                f"pipeline: expected max_staleness >= 0 and sync_every >= 1, got {self.max_staleness}, "
                f"{self.sync_every}"
            )
        if not self.bucket_mb > 0:
            raise ValueError(f"pipeline.bucket_mb: expected > 0, got {self.bucket_mb}")
        if self.sync_every > self.max_staleness + 1:
            raise ValueError(
                f"pipeline: sync_every {self.sync_every} > max_staleness + 1 = {self.max_staleness + 1}: every sample "
                "generated between pushes would be too stale to train on; raise max_staleness or push more often"
            )


@dataclass
class RayConfig:
    address: str = _help("Ray cluster to attach to (empty: start a local Ray, dashboard off)", "")
    node_ip: str = _help(
        "IP address of a local Ray's node: 127.0.0.1 keeps every Ray port (GCS, raylet, object manager, workers, "
        "agents) on loopback; another address of this machine is advertised and Ray listens on all interfaces "
        "(an attached cluster keeps its own addresses)",
        "127.0.0.1",
    )
    temp_dir: str = _help("local Ray's temp dir (empty: /tmp/async_ppo_ray_<pid>)", "")
    keep_temp_dir: bool = _help(
        "keep the local Ray's temp dir (logs, session files) after the run; false: removed when the run ends, after "
        "an error too (an existing dir loses only this run's session_* entry)",
        False,
    )
    node_startup_timeout_s: int = _help(
        "seconds a local Ray's node may take to start, for each of Ray's two waits (GCS port, raylet registration; "
        "Ray's own default is 30 s each); at least 30",
        120,
    )
    num_rollouters: int = _help("rollouter actors (each owns one engine)", 1)
    rollouter_cpus: float = _help("CPUs reserved per rollouter", 1.0)
    trainer_cpus: float = _help("CPUs reserved for the trainer (its torch threads: run.torch_threads)", 1.0)
    rollouter_threads: int = _help("torch threads of each rollouter's process (its native engine)", 1)
    helper_niceness: int = _help(
        "niceness added to rollouter and validator processes: where they share cores with the trainer (the "
        "bottleneck of a small CPU run) the trainer goes first; 0: off",
        5,
    )
    rollouter_gpus: float = _help("GPUs reserved per rollouter", 0.0)
    trainer_gpus: float = _help("GPUs reserved for the trainer", 0.0)
    startup_timeout_s: float = _help("seconds to wait for the resources (placement group) before failing", 60.0)
    call_timeout_s: float = _help("seconds a weight push or checkpoint call may take before it is an error", 300.0)
    stall_timeout_s: float = _help("seconds without a complete group before the trainer gives up with an error", 600.0)

    def __post_init__(self) -> None:
        if self.num_rollouters < 1 or self.rollouter_threads < 1:
            raise ValueError(
                f"ray: expected num_rollouters >= 1 and rollouter_threads >= 1, got {self.num_rollouters}, "
                f"{self.rollouter_threads}"
            )
        if min(self.rollouter_cpus, self.trainer_cpus, self.rollouter_gpus, self.trainer_gpus) < 0:
            raise ValueError("ray: expected non-negative CPU and GPU reservations")
        if self.node_startup_timeout_s < 30:
            raise ValueError(
                f"ray.node_startup_timeout_s: expected >= 30 (Ray waits at least 30 s for its raylet), got "
                f"{self.node_startup_timeout_s}"
            )
        self._check_node_ip()

    def _check_node_ip(self) -> None:
        import ipaddress

        try:
            ip = ipaddress.ip_address(self.node_ip)
        except ValueError:
            raise ValueError(f"ray.node_ip: expected an IP address, got {self.node_ip!r}") from None
        if ip.is_unspecified or (ip.is_loopback and self.node_ip != "127.0.0.1"):
            raise ValueError(
                f"ray.node_ip: expected 127.0.0.1 (loopback only) or an address of this machine, got {self.node_ip}:"
                " Ray binds loopback only for exactly 127.0.0.1 and all interfaces otherwise"
            )
        if self.address and self.node_ip != "127.0.0.1":
            raise ValueError(
                f"ray.node_ip: applies to a local Ray only, got {self.node_ip} with ray.address {self.address!r}"
            )


@dataclass
class FaultConfig:
    """Injected faults, for tests of the recovery paths."""

    rollouter_crash_after_groups: int = _help(
        "rollouter 0's first incarnation exits (os._exit) after finishing this many groups (0: never)", 0
    )
    push_error_at_version: int = _help("rollouter 0 raises when asked to load this weight version (0: never)", 0)
    teacher_crash_after_calls: int = _help(
        "distillation: teacher replica 0's first incarnation exits (os._exit) on this scoring call (0: never)", 0
    )


@dataclass
class AsyncConfig(RecipeConfig):
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
