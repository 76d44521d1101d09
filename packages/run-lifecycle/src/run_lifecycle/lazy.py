"""Lazy package exports: `from package import X` imports X's module on first use, so that a package's light modules
(its config sections, which a command line's `--help` imports) never pull in torch, numpy or plotting through the
package's `__init__` (`run_lifecycle`, `trainers`, `trainers.backend`, `trainers.algorithm`)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, exporting each name from its module (a dotted path)."""

    def getattr_(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        loaded = importlib.import_module(module)
        # bind every export of that module now, as an eager `from package.x import ...` in `__init__` would (no
        # export is named after its own module: importing `package.x` would rebind that name to the module)
        owner = sys.modules[package]
        for other, where in names.items():
            if where == module:
                setattr(owner, other, getattr(loaded, other))
        return getattr(loaded, name)

    def dir_() -> list[str]:
        return sorted(names)

    return getattr_, dir_
