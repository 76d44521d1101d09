"""Typed nested dataclass configs: defaults < TOML file < `--section.key value` flags. Standard library only."""

from run_config.fields import Leaf, leaves
from run_config.loader import add_arguments, from_dict, parse_config, resolve
from run_config.writer import to_dict, to_toml

__all__ = ["Leaf", "add_arguments", "from_dict", "leaves", "parse_config", "resolve", "to_dict", "to_toml"]
