"""The model preset names `moe_models.MoEConfig.preset` accepts, known without importing torch.

Importing any `moe_models` module runs the package's `__init__`, which imports torch, so the names are read from
the source of `moe_models/config.py`: the keys of its module-level literal `PRESETS` dict. The file is located
without executing the package (a top-level `find_spec` only finds it) and parsed, never run.
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


@functools.cache
def model_preset_names() -> tuple[str, ...]:
    """The preset names, sorted."""
    path = _config_source()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "PRESETS" for t in targets) and node.value is not None:
                return _names(node.value, path)
    raise ImportError(f"{path}: expected a module-level literal PRESETS dict, got none")
