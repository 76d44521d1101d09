"""Typed nested dataclass configs: defaults < TOML file < `--section.key value` flags. Standard library only.

A field annotated with a union of config dataclasses, each declaring `kind: Literal["<name>"] = "<name>"`, is a
tagged section: `--section.kind <name>` (or `--section <name>`, `section = "<name>"` in TOML) chooses the member.
"""

from run_config.arguments import add_arguments, parse_config, resolve
from run_config.fields import Leaf, leaves
from run_config.loader import from_dict
from run_config.markdown import to_markdown
from run_config.writer import to_dict, to_toml

__all__ = [
    "Leaf",
    "add_arguments",
    "from_dict",
    "leaves",
    "parse_config",
    "resolve",
    "to_dict",
    "to_markdown",
    "to_toml",
]
