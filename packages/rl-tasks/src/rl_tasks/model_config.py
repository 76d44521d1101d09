"""ModelConfig: which model a run trains: a checkpoint the user brings (`path`), or a small model of a supported
family built by the supervised warm-up (`family` at a size `preset`). Checked without importing torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from run_lifecycle.fields import help_field

from rl_tasks.model_presets import model_family_names, model_preset_names

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class ModelConfig:
    """`path` set: that checkpoint (config.json + safetensors + tokenizer files, Hugging Face layout) is the policy,
    the reference and the default teacher's family; no warm-up. `path` empty: the warm-up builds a `preset`-sized
    `family` model on the task (cached) and that is the base."""

    path: str = help_field(
        "a checkpoint directory of a supported family with its tokenizer files, used as the base (no warm-up); "
        "empty: a warm-up model of model.family at model.preset",
        "",
    )
    family: str = help_field(
        "the warm-up model's family (Hugging Face model_type) when model.path is empty", "qwen3_moe"
    )
    preset: str = help_field("the warm-up model's size preset when model.path is empty", "tiny")
    tokenizer: str = help_field(
        "a tokenizer folder (tokenizer.json, tokenizer_config.json) kept outside the checkpoint; empty: the "
        "checkpoint's own (model.path's, or the warm-up's)",
        "",
    )
    chat_template_options: tuple[str, ...] = help_field(
        "the chat template's own variables as key=value pairs, e.g. enable_thinking=false (values are JSON: true, "
        "false, null, numbers; anything else a string)",
        (),
    )

    def __post_init__(self) -> None:
        if self.family not in model_family_names():
            raise ValueError(f"model.family: expected one of {list(model_family_names())}, got {self.family!r}")
        if self.preset not in model_preset_names():
            raise ValueError(f"model.preset: expected one of {list(model_preset_names())}, got {self.preset!r}")
        if self.path:
            checkpoint_family(Path(self.path), tokenizer=not self.tokenizer)
        elif self.tokenizer or self.chat_template_options:
            raise ValueError(
                "model.tokenizer, model.chat_template_options: expected them with model.path (a warm-up trains with "
                f"the task's own tokenizer and its template's defaults), got {self.tokenizer!r}, "
                f"{list(self.chat_template_options)} without one"
            )
        if self.tokenizer:
            missing = [name for name in TOKENIZER_FILES if not (Path(self.tokenizer) / name).is_file()]
            if missing:
                raise ValueError(
                    f"model.tokenizer: {self.tokenizer} has no {', '.join(missing)}; expected a tokenizer folder"
                )
        self.template_options()

    def template_options(self) -> dict[str, object]:
        """`chat_template_options` as the template's variables."""
        out: dict[str, object] = {}
        for pair in self.chat_template_options:
            key, sep, text = pair.partition("=")
            if not sep or not key.strip().isidentifier():
                raise ValueError(f"model.chat_template_options: expected key=value pairs, got {pair!r}")
            try:
                out[key.strip()] = json.loads(text)
            except json.JSONDecodeError:
                out[key.strip()] = text
        return out

    def resolved_family(self) -> str:
        """The family the run trains: the checkpoint's when `path` is set, else `family`."""
        return checkpoint_family(Path(self.path)) if self.path else self.family


def checkpoint_family(path: Path, *, tokenizer: bool = True) -> str:
    """The `model_type` of a checkpoint directory; raises ValueError naming what is missing (its tokenizer files
    too, with `tokenizer`) or the supported families when its config.json asks for another."""
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model.path: expected a checkpoint directory with config.json, got {path}")
    missing = [name for name in TOKENIZER_FILES if not (path / name).is_file()]
    if tokenizer and missing:
        raise ValueError(
            f"model.path: {path} has no {', '.join(missing)}; expected the checkpoint's tokenizer files (or "
            "model.tokenizer DIR for a tokenizer kept elsewhere)"
        )
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except (json.JSONDecodeError, AttributeError) as e:
        raise ValueError(f"model.path: {config_file} is not a JSON object: {e}") from e
    if model_type not in model_family_names():
        raise ValueError(
            f"model.path: {config_file} has model_type {model_type!r}; supported families: {list(model_family_names())}"
        )
    return str(model_type)
