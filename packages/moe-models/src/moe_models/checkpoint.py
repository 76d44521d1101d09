"""Hugging Face checkpoints (config.json + model.safetensors) and numpy weight snapshots for engines.

Each family has its own key names and layouts on disk (what transformers' `save_pretrained` writes and vLLM reads),
which `moe_models.families` maps to and from this package's canonical in-memory names (transformers' Qwen3-MoE
ones: fused `mlp.experts.gate_up_proj` [E, 2I, hidden] and `mlp.experts.down_proj` [E, hidden, I]). Saving writes
the family's disk layout; loading accepts the disk layout or transformers' in-memory one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from moe_models.config import MoEConfig
from moe_models.families import family
from moe_models.model import MoEForCausalLM

_WEIGHTS_FILE = "model.safetensors"
_INDEX_FILE = "model.safetensors.index.json"


class SavableTokenizer(Protocol):
    def save(self, directory: str | Path) -> None: ...


def _owned_state(model: MoEForCausalLM) -> dict[str, torch.Tensor]:
    """The model's state dict without the tied `lm_head.weight` alias (as Hugging Face saves it)."""
    state = dict(model.state_dict())
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def save_pretrained(model: MoEForCausalLM, directory: str | Path, tokenizer: SavableTokenizer | None = None) -> Path:
    """Writes config.json, generation_config.json and model.safetensors (disk layout), plus the tokenizer."""
    return save_weights(_owned_state(model), model.config, directory, tokenizer)


def save_weights(
    state: Mapping[str, torch.Tensor],
    config: MoEConfig,
    directory: str | Path,
    tokenizer: SavableTokenizer | None = None,
    *,
    stop_ids: Sequence[int] | None = None,
) -> Path:
    """`save_pretrained` from weights alone (canonical names, or the family's disk or transformers' in-memory
    layout; the tied lm_head alias may be absent): config.json (with the weights' dtype), generation_config.json
    (eos: `stop_ids`, a list when several, else config.json's) and model.safetensors in the family's disk layout,
    plus the tokenizer. No model is built, so a large policy costs no second copy."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    fam = family(config.model_type)
    canonical = fam.from_disk(dict(state), config)
    if config.tie_word_embeddings:
        canonical.pop("lm_head.weight", None)
    hf_config = config.to_hf_dict()
    hf_config["torch_dtype"] = str(next(iter(canonical.values())).dtype).removeprefix("torch.")
    (path / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n")
    eos: int | list[int] | tuple[int, ...] | None = config.eos_token_id
    if stop_ids is not None:
        eos = list(stop_ids) if len(stop_ids) > 1 else int(stop_ids[0])
    generation = {
        "bos_token_id": config.bos_token_id,
        "eos_token_id": list(eos) if isinstance(eos, tuple) else eos,
        "pad_token_id": config.pad_token_id,
    }
    (path / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tensors = {k: v.detach().cpu().contiguous() for k, v in fam.to_disk(canonical, config).items()}
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


def load_config(directory: str | Path) -> MoEConfig:
    """The model config of a checkpoint directory's config.json (any supported family)."""
    config_file = Path(directory) / "config.json"
    if not config_file.exists():
        raise ValueError(f"{directory}: got no config.json, expected a saved model directory")
    return MoEConfig.from_hf_dict(json.loads(config_file.read_text()))


def load_pretrained(
    directory: str | Path, *, dtype: torch.dtype = torch.float32, vocab_size: int | None = None
) -> MoEForCausalLM:
    """Builds the model from config.json and loads its weights (disk or transformers' in-memory layout), in
    `dtype`. `vocab_size`: the tokenizer's ids, when the embedding pads beyond them (`MoEConfig.tokenizer_vocab_size`:
    the padding rows are never scored); None: every row is a token."""
    path = Path(directory)
    config = load_config(path)
    if vocab_size is not None:
        config = config.replace(tokenizer_vocab_size=vocab_size)
    model = MoEForCausalLM(config)
    load_state_dict_tensors(model, _read_weights(path))
    return model.to(dtype)


def load_state_dict_tensors(model: MoEForCausalLM, state: dict[str, torch.Tensor]) -> None:
    """Copies weights (canonical names, or the family's disk or transformers in-memory layout) into the model's
    existing parameters and buffers in place; strict on names and shapes, so engine code holding references to
    parameters sees the new values."""
    fused = family(model.config.model_type).from_disk(state, model.config)
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


def hf_state_dict(model: MoEForCausalLM) -> dict[str, torch.Tensor]:
    """The weights under transformers' in-memory names and layouts for the model's family (what transformers' own
    class of that family holds; the tied lm_head alias omitted): for backends that build that class or map from it."""
    return family(model.config.model_type).to_hf_state(_owned_state(model), model.config)


def state_dict_numpy(model: MoEForCausalLM, *, disk_layout: bool = False) -> dict[str, np.ndarray]:
    """Weights as numpy arrays (canonical in-memory names by default; `disk_layout=True` gives the family's checkpoint
    keys, for engines such as vLLM). The tied lm_head alias is omitted; bfloat16 is widened to float32."""
    state = _owned_state(model)
    if disk_layout:
        state = family(model.config.model_type).to_disk(state, model.config)
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
