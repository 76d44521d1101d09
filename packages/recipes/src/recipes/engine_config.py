"""The `rollout.engine` section: which inference engine serves the rollouts (a tagged union chosen by `kind`).
Standard library only (`--help` imports it); `build()` imports the engine."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from recipes.engines.protocol import RolloutEngine


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class EngineSite:
    """Where and what an engine serves: the base checkpoint (an HF folder), the context every call must fit
    (longest prompt + response budget), its sampling seed, a working directory of its own (logs, pushed weights)
    and its index among the run's engines (rollouter id); `true_on_policy`: `numerics.true_on_policy`;
    `cpu_threads`: the CPU threads the engine may keep busy (an async rollouter's `ray.rollouter_threads`; 0: every
    core this process may run on, as in apps/sync_ppo, whose generation and training take turns)."""

    checkpoint_dir: str
    max_len: int
    seed: int
    work_dir: str
    index: int = 0
    true_on_policy: bool = False  # numerics.true_on_policy: sample with the invariant forward (native only)
    cpu_threads: int = 0

    def threads(self) -> int:
        """`cpu_threads`, or (0) the number of cores this process may run on."""
        return self.cpu_threads or usable_cores()


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one, as Linux does; else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class NativeEngineConfig:
    """The embedded engine (`native_engine`): continuous batching in the owning process, weights loaded in place.
    Its model steps run on a thread of their own at `EngineSite.cpu_threads` torch threads (an async rollouter's
    `ray.rollouter_threads`; 1 in apps/sync_ppo, whatever the trainer's `run.torch_threads`: two OpenMP teams of 2
    sharing 2 cores slowed both, see `native_engine.step_thread`)."""

    kind: Literal["native"] = "native"
    slots: int = _help("KV-cache slots (sequences decoded together)", 256)
    dtype: Literal["float32", "bfloat16"] = _help(
        "the engine's weights and KV cache; bfloat16: the trainer keeps fp32 weights and sends them in bf16 (the "
        "compiled decode's C kernels are fp32-only, so a compiled bf16 step runs torch's ops)",
        "float32",
    )
    compile_decode: bool = _help(
        "torch.compile the decode step: a faster decode after a compile of seconds; pays off with long responses, not "
        "on the default task (8-token answers: prefill-bound)",
        False,
    )
    kernel_threads: int = _help(
        "threads of the compiled decode's C kernels (attention, routed experts; fp32 only); 0: the CPUs the engine "
        "may use (apps/async_ppo: ray.rollouter_threads, so a rollouter leaves the trainer its core; apps/sync_ppo: "
        "every core)",
        0,
    )
    step_delay_ms: float = _help(
        "throttle: the engine waits this long after each decode step, as a slower model would (tests and demos of "
        "weight pushes landing mid-response on a tiny model); 0: none",
        0.0,
    )

    def __post_init__(self) -> None:
        if self.slots < 1:
            raise ValueError(f"rollout.engine.slots: expected >= 1, got {self.slots}")
        if isinstance(self.kernel_threads, bool) or not isinstance(self.kernel_threads, int) or self.kernel_threads < 0:
            raise ValueError(f"rollout.engine.kernel_threads: expected an int >= 0, got {self.kernel_threads!r}")
        if not 0 <= self.step_delay_ms <= 10_000:
            raise ValueError(f"rollout.engine.step_delay_ms: expected 0..10000, got {self.step_delay_ms}")

    async def build(self, site: EngineSite) -> RolloutEngine:
        from recipes.engines.native import NativeRolloutEngine

        return NativeRolloutEngine(self, site)


@dataclass
class VLLMEngineConfig:
    """A vLLM server started by the process that owns the engine, from its own environment
    (`scripts/setup_vllm_env.sh`); weights reach it as an HF folder it reloads."""

    kind: Literal["vllm"] = "vllm"
    max_num_seqs: int = _help("vLLM's max_num_seqs (capped at 256); more requests wait in vLLM's queue", 256)
    dtype: Literal["float32", "bfloat16"] = _help(
        "the server's --dtype (weights and compute); bfloat16: the trainer's fp32 weights are written in bf16",
        "float32",
    )
    python: str = _help("python of the vLLM environment (empty: .vllm-env/bin/python)", "")
    startup_timeout_s: float = _help("seconds to wait for the server to become healthy", 600.0)

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or not self.startup_timeout_s > 0:
            raise ValueError(
                f"rollout.engine (vllm): expected max_num_seqs >= 1 and startup_timeout_s > 0, got "
                f"{self.max_num_seqs}, {self.startup_timeout_s}"
            )

    async def build(self, site: EngineSite) -> RolloutEngine:
        from recipes.engines.vllm import VLLMRolloutEngine

        return await VLLMRolloutEngine.launch(self, site)


@dataclass
class SGLangEngineConfig:
    """Running SGLang servers, one per engine (rollouter), serving the base checkpoint; weights reach them as HF
    folders written under `weights_dir`, which the servers must be able to read."""

    kind: Literal["sglang"] = "sglang"
    urls: tuple[str, ...] = _help("base URLs of the servers, one per rollouter (e.g. http://10.0.0.2:30000)", ())
    weights_dir: str = _help("folder the servers read pushed weights from (empty: the run directory's engine/)", "")
    pause_mode_keep: Literal["retract", "in_place"] = _help(
        "SGLang's pause for a `keep` push: retract (in-flight requests re-prefill under the new weights) or in_place "
        "(they keep their KV cache)",
        "retract",
    )

    def __post_init__(self) -> None:
        bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"rollout.engine.urls: expected http(s):// URLs, got {bad}")

    async def build(self, site: EngineSite) -> RolloutEngine:
        from recipes.engines.sglang import SGLangRolloutEngine

        if site.index >= len(self.urls):
            raise ValueError(
                f"rollout.engine.urls: expected a server URL for engine {site.index} ({site.index + 1} or more URLs), "
                f"got {len(self.urls)}: {list(self.urls)}"
            )
        weights_dir = Path(self.weights_dir) if self.weights_dir else Path(site.work_dir)
        return await SGLangRolloutEngine.connect(self.urls[site.index], site, weights_dir, self.pause_mode_keep)


EngineConfig = NativeEngineConfig | VLLMEngineConfig | SGLangEngineConfig
