"""Hugging Face checkpoints (config.json + model.safetensors) and numpy weight snapshots for engines.

Two key layouts exist. In memory (this model and transformers 5.x) each MoE layer holds fused
`mlp.experts.gate_up_proj` [E, 2I, hidden] and `mlp.experts.down_proj` [E, hidden, I]. On disk (what
transformers 5.x `save_pretrained` writes and vLLM reads) experts are per-module:
`mlp.experts.{e}.{gate,up,down}_proj.weight`. Saving writes the disk layout; loading accepts both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from moe_models.config import MoEConfig
from moe_models.model import MoEForCausalLM

_PER_EXPERT = re.compile(
    r"^(?P<prefix>.+\.mlp\.experts)\.(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)
_WEIGHTS_FILE = "model.safetensors"
_INDEX_FILE = "model.safetensors.index.json"


class SavableTokenizer(Protocol):
    def save(self, directory: str | Path) -> None: ...


def _to_disk_layout(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Splits fused expert tensors into per-expert `[out, in]` matrices."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name.endswith(".mlp.experts.gate_up_proj"):
            prefix = name[: -len(".gate_up_proj")]
            inter = tensor.shape[1] // 2
            for e in range(tensor.shape[0]):
                out[f"{prefix}.{e}.gate_proj.weight"] = tensor[e, :inter]
                out[f"{prefix}.{e}.up_proj.weight"] = tensor[e, inter:]
        elif name.endswith(".mlp.experts.down_proj"):
            prefix = name[: -len(".down_proj")]
            for e in range(tensor.shape[0]):
                out[f"{prefix}.{e}.down_proj.weight"] = tensor[e]
        else:
            out[name] = tensor
    return out


def _to_memory_layout(state: dict[str, torch.Tensor], config: MoEConfig) -> dict[str, torch.Tensor]:
    """Fuses per-expert matrices (if present) into the in-memory [E, ...] tensors."""
    out: dict[str, torch.Tensor] = {}
    per_expert: dict[str, dict[str, dict[int, torch.Tensor]]] = {}
    for name, tensor in state.items():
        match = _PER_EXPERT.match(name)
        if match is None:
            out[name] = tensor
            continue
        proj = per_expert.setdefault(match["prefix"], {}).setdefault(match["proj"], {})
        proj[int(match["expert"])] = tensor
    for prefix, projs in per_expert.items():
        stacked: dict[str, torch.Tensor] = {}
        for proj_name in ("gate_proj", "up_proj", "down_proj"):
            experts = projs.get(proj_name, {})
            if sorted(experts) != list(range(config.num_experts)):
                raise ValueError(
                    f"{prefix}.*.{proj_name}: got experts {sorted(experts)}, expected 0..{config.num_experts - 1}"
                )
            stacked[proj_name] = torch.stack([experts[e] for e in range(config.num_experts)])
        out[f"{prefix}.gate_up_proj"] = torch.cat([stacked["gate_proj"], stacked["up_proj"]], dim=1)
        out[f"{prefix}.down_proj"] = stacked["down_proj"]
    return out


def _owned_state(model: MoEForCausalLM) -> dict[str, torch.Tensor]:
    """The model's state dict without the tied `lm_head.weight` alias (as Hugging Face saves it)."""
    state = dict(model.state_dict())
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def save_pretrained(model: MoEForCausalLM, directory: str | Path, tokenizer: SavableTokenizer | None = None) -> Path:
    """Writes config.json, generation_config.json and model.safetensors (disk layout), plus the tokenizer."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    config = model.config
    hf_config = config.to_hf_dict()
    hf_config["torch_dtype"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    (path / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    generation = {
        "bos_token_id": config.bos_token_id,
        "eos_token_id": config.eos_token_id,
        "pad_token_id": config.pad_token_id,
    }
    (path / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tensors = {k: v.detach().cpu().contiguous() for k, v in _to_disk_layout(_owned_state(model)).items()}
    save_file(tensors, str(path / _WEIGHTS_FILE), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save(path)
    return path


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / _WEIGHTS_FILE).exists():
        return load_file(str(path / _WEIGHTS_FILE))
    if (path / _INDEX_FILE).exists():
        index = json.loads((path / _INDEX_FILE).read_text())
        state: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            state.update(load_file(str(path / shard)))
        return state
    raise ValueError(f"{path}: got no {_WEIGHTS_FILE} or {_INDEX_FILE}, expected a safetensors checkpoint")


def load_pretrained(directory: str | Path, *, dtype: torch.dtype = torch.float32) -> MoEForCausalLM:
    """Builds the model from config.json and loads its weights (either key layout), in `dtype`."""
    path = Path(directory)
    config_file = path / "config.json"
    if not config_file.exists():
        raise ValueError(f"{path}: got no config.json, expected a saved model directory")
    config = MoEConfig.from_hf_dict(json.loads(config_file.read_text()))
    model = MoEForCausalLM(config)
    load_state_dict_tensors(model, _read_weights(path))
    return model.to(dtype)


def load_state_dict_tensors(model: MoEForCausalLM, state: dict[str, torch.Tensor]) -> None:
    """Copies weights (either key layout) into the model's existing parameters in place; strict on names
    and shapes, so engine code holding references to parameters sees the new values."""
    fused = _to_memory_layout(state, model.config)
    expected = _owned_state(model)
    missing = sorted(set(expected) - set(fused))
    unexpected = sorted(set(fused) - set(expected))
    if model.config.tie_word_embeddings and "lm_head.weight" in unexpected:
        unexpected.remove("lm_head.weight")
    if missing or unexpected:
        raise ValueError(f"state dict keys: missing {missing[:8]}, unexpected {unexpected[:8]} (expected exact match)")
    with torch.no_grad():
        for name, target in expected.items():
            source = fused[name]
            if tuple(source.shape) != tuple(target.shape):
                raise ValueError(f"{name}: got shape {tuple(source.shape)}, expected {tuple(target.shape)}")
            target.copy_(source.to(device=target.device, dtype=target.dtype))


def state_dict_numpy(model: MoEForCausalLM, *, disk_layout: bool = False) -> dict[str, np.ndarray]:
    """Weights as numpy arrays (in-memory key layout by default; `disk_layout=True` gives per-expert keys
    for engines such as vLLM). The tied lm_head alias is omitted; bfloat16 is widened to float32."""
    state = _owned_state(model)
    if disk_layout:
        state = _to_disk_layout(state)
    out: dict[str, np.ndarray] = {}
    for name, tensor in state.items():
        t = tensor.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        out[name] = t.numpy().copy()
    return out


def load_state_dict_numpy(model: MoEForCausalLM, state: dict[str, np.ndarray]) -> None:
    """Inverse of `state_dict_numpy` (either layout); copies in place, casting to each parameter's dtype.
    Read-only arrays (e.g. zero-copy from Ray's object store) are copied once, as torch needs writable memory."""
    load_state_dict_tensors(
        model, {name: torch.from_numpy(np.require(arr, requirements="W")) for name, arr in state.items()}
    )
