"""The `rollout.engine` sections of kinds `vllm` and `sglang` (engine-adapters' engines). Standard library only
(`--help` imports it); `build()` opens the engine engine-adapters registers for the kind
(`rollout_core.engine_registry`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rollout_core.config_fields import help_field
from rollout_core.engine_registry import ROLLOUT_ENGINES, open_registered
from rollout_core.vllm_families import DEEPSEEK_V3_CPU_MLA_DIMS, VLLM_FAMILIES, check_vllm_cpu_config

if TYPE_CHECKING:
    from rollout_core import RolloutEngine, RolloutSite


def vllm_family_refusal(section: str, family: str) -> str:
    """Why vLLM on CPU cannot serve a warm-up model of `family` (built at a size preset), or "": the adapter's
    family table (`vllm_families`), and for DeepSeek-V3 the MLA dims vLLM's CPU kernel compiles, which the warm-up
    presets do not have."""
    entry = VLLM_FAMILIES.get(family)
    if entry is None or not entry.served_on_cpu:
        return f"{section}: {entry.reason if entry else 'not a family the adapter knows'} (got a {family} model)"
    if family == "deepseek_v3":
        return (
            f"{section}: vLLM's CPU MLA kernel needs {dict(DEEPSEEK_V3_CPU_MLA_DIMS)}, which the deepseek_v3 warm-up "
            "presets do not have; bring such a checkpoint with model.path"
        )
    return ""


def vllm_checkpoint_refusal(section: str, checkpoint_dir: str) -> str:
    """Why vLLM on CPU cannot serve the checkpoint in `checkpoint_dir` (`check_vllm_cpu_config`), or ""."""
    try:
        check_vllm_cpu_config(json.loads((Path(checkpoint_dir) / "config.json").read_text()))
    except (ValueError, OSError) as e:
        return f"{section}: {e}"
    return ""


@dataclass
class VLLMEngineConfig:
    """A vLLM server started by the process that owns the engine, from its own environment
    (`scripts/setup_vllm_env.sh`); weights reach it as an HF folder it reloads."""

    kind: Literal["vllm"] = "vllm"
    max_num_seqs: int = help_field("vLLM's max_num_seqs (capped at 256); more requests wait in vLLM's queue", 256)
    dtype: Literal["float32", "bfloat16"] = help_field(
        "the server's --dtype (weights and compute); bfloat16: the trainer's fp32 weights are written in bf16",
        "float32",
    )
    python: str = help_field("python of the vLLM environment (empty: .vllm-env/bin/python)", "")
    startup_timeout_s: float = help_field("seconds to wait for the server to become healthy", 600.0)

    def unsupported_family(self, family: str) -> str:
        """Why the vLLM adapter cannot serve a warm-up model of `family`, or "" (`vllm_families`)."""
        return vllm_family_refusal("rollout.engine vllm", family)

    def unsupported_checkpoint(self, checkpoint_dir: str) -> str:
        """Why the vLLM adapter cannot serve the checkpoint in `checkpoint_dir` (its config.json), or ""."""
        return vllm_checkpoint_refusal("rollout.engine vllm", checkpoint_dir)

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or not self.startup_timeout_s > 0:
            raise ValueError(
                f"rollout.engine (vllm): expected max_num_seqs >= 1 and startup_timeout_s > 0, got "
                f"{self.max_num_seqs}, {self.startup_timeout_s}"
            )

    async def build(self, site: RolloutSite) -> RolloutEngine:
        """A vLLM server and its adapter, the rollout engine engine-adapters registers as kind `vllm`."""
        return await open_registered(ROLLOUT_ENGINES, self, site)


@dataclass
class SGLangEngineConfig:
    """Running SGLang servers, one per engine (rollouter), serving the base checkpoint; weights reach them as HF
    folders written under `weights_dir`, which the servers must be able to read."""

    kind: Literal["sglang"] = "sglang"
    urls: tuple[str, ...] = help_field("base URLs of the servers, one per rollouter (e.g. http://10.0.0.2:30000)", ())
    weights_dir: str = help_field(
        "folder the servers read pushed weights from (empty: the run directory's engine/)", ""
    )
    pause_mode_keep: Literal["retract", "in_place"] = help_field(
        "SGLang's pause for a `keep` push: retract (in-flight requests re-prefill under the new weights) or in_place "
        "(they keep their KV cache)",
        "retract",
    )

    def unsupported_family(self, family: str) -> str:
        """ "": the servers load the checkpoint themselves, and SGLang returns the routed experts of any MoE model."""
        return ""

    def __post_init__(self) -> None:
        bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"rollout.engine.urls: expected http(s):// URLs, got {bad}")

    async def build(self, site: RolloutSite) -> RolloutEngine:
        """The adapter of server `urls[site.index]`, the rollout engine engine-adapters registers as kind
        `sglang`."""
        return await open_registered(ROLLOUT_ENGINES, self, site)
