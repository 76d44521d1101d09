"""The model preset names `moe_models.MoEConfig.preset` accepts, those of production vocabulary and the model
families it supports, known without importing torch.

Importing any `moe_models` module runs the package's `__init__`, which imports torch, so the names are read from
the source of `moe_models/config.py`: the keys of its module-level literal `PRESETS` dict and its literal
`FAMILY_NAMES` and `FULL_VOCAB_PRESETS` tuples. The file is located without executing the package (a top-level
`find_spec` only finds it) and parsed, never run.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


def _config_source() -> Path:
    spec = importlib.util.find_spec("moe_models")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ImportError(f"moe_models: expected an installed package, got {spec!r}")
    return Path(locations[0]) / "config.py"


def _names(value: ast.expr, path: Path) -> tuple[str, ...]:
    try:
        presets = ast.literal_eval(value)
    except ValueError:
        presets = None
    if not isinstance(presets, dict) or not presets or not all(isinstance(k, str) for k in presets):
        got = ast.unparse(value)
        raise ImportError(f"{path}: PRESETS: expected a non-empty literal dict keyed by name, got {got:.80}")
    return tuple(sorted(presets))


def _literal(name: str) -> tuple[ast.expr, Path]:
    """The value expression of the module-level assignment to `name` in moe_models/config.py."""
    path = _config_source()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return node.value, path
    kind = "dict" if name == "PRESETS" else "tuple"  # FAMILY_NAMES, FULL_VOCAB_PRESETS
    raise ImportError(f"{path}: expected a module-level literal {name} {kind}, got none")


@functools.cache
def model_preset_names() -> tuple[str, ...]:
    """The preset names, sorted."""
    return _names(*_literal("PRESETS"))


@functools.cache
def full_vocab_presets() -> tuple[str, ...]:
    """The presets of production vocabulary (moe_models' `FULL_VOCAB_PRESETS`): a 151,936-row embedding and the
    151,669-id Qwen-layout tokenizer."""
    value, path = _literal("FULL_VOCAB_PRESETS")
    try:
        names = ast.literal_eval(value)
    except ValueError:
        names = None
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        raise ImportError(
            f"{path}: FULL_VOCAB_PRESETS: expected a literal tuple of names, got {ast.unparse(value):.80}"
        )
    return names


@functools.cache
def model_family_names() -> tuple[str, ...]:
    """The supported families (Hugging Face `model_type`s), in moe_models' order."""
    value, path = _literal("FAMILY_NAMES")
    try:
        names = ast.literal_eval(value)
    except ValueError:
        names = None
    if not isinstance(names, tuple) or not names or not all(isinstance(n, str) for n in names):
        raise ImportError(
            f"{path}: FAMILY_NAMES: expected a non-empty literal tuple of names, got {ast.unparse(value):.80}"
        )
    return names
