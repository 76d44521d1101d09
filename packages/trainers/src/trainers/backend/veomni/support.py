"""What the VeOmni backend trains and why it refuses the rest (standard library only: the `backend` section's checks
import it)."""

from __future__ import annotations

from trainers.backend.families import family_refusal

VEOMNI_FAMILIES: tuple[str, ...] = ("qwen3_moe",)  # the families VeOmni's models and our mapping cover


def _no_replay_hook(name: str, family: str) -> str:
    return (
        f"VeOmni 0.1.12's {name} MoE block never calls its router-replay hook "
        f"(veomni.utils.moe_router_replay.maybe_replay_indices; {family!r} is not in its SUPPORTED_MOE_MODEL_TYPES), "
        "so router replay cannot reach its routers"
    )


# Why VeOmni 0.1.12 cannot train each moe_models family but Qwen3-MoE (docs/veomni.md, "Model families"; the
# `veomni`-marked tests/trainers/test_trainers_veomni_families.py pins each reason against VeOmni itself).
VEOMNI_UNSERVED: dict[str, str] = {
    "qwen2_moe": "VeOmni 0.1.12 has no Qwen2-MoE model (no 'qwen2_moe' in its model registry)",
    "mixtral": "VeOmni 0.1.12 has no Mixtral model (no 'mixtral' in its model registry)",
    "deepseek_v3": _no_replay_hook("DeepSeek-V3", "deepseek_v3"),
    "gpt_oss": _no_replay_hook("GPT-OSS", "gpt_oss"),
}


def veomni_family_refusal(family: str) -> str:
    """Why the VeOmni backend cannot train a model of `family` (a Hugging Face model_type), or "" when it can."""
    return family_refusal("veomni", family, VEOMNI_FAMILIES, VEOMNI_UNSERVED.get(family, ""))
