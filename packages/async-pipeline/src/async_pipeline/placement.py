"""Placement: the Ray node each role of a run landed on, and every move of a rollouter to another node after a
failure; `placement.json` in the run directory, rewritten (atomically) whenever it changes."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

PLACEMENT_FILE = "placement.json"


@dataclass(frozen=True)
class RollouterMove:
    rollouter: int
    from_node: str
    to_node: str
    weight_version: int  # the version the replacement started on


@dataclass
class Placement:
    """Node ids (Ray's hex ids). `rollouters` maps rollouter id -> its current node."""

    root: Path
    trainer: str
    broker: str
    validator: str
    rollouters: dict[int, str] = field(default_factory=dict)
    moves: list[RollouterMove] = field(default_factory=list)

    def rollouter_started(self, rollouter_id: int, node: str, weight_version: int) -> None:
        """Records where a rollouter (first start or replacement) runs, then writes the file."""
        before = self.rollouters.get(rollouter_id)
        if before is not None:
            self.moves.append(RollouterMove(rollouter_id, before, node, weight_version))
        self.rollouters[rollouter_id] = node
        self.write()

    def write(self) -> None:
        data = {
            "trainer": self.trainer,
            "broker": self.broker,
            "validator": self.validator,
            "rollouters": {str(k): v for k, v in sorted(self.rollouters.items())},
            "moves": [
                {"rollouter": m.rollouter, "from": m.from_node, "to": m.to_node, "weight_version": m.weight_version}
                for m in self.moves
            ],
        }
        tmp = self.root / f".{PLACEMENT_FILE}.tmp"
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, self.root / PLACEMENT_FILE)
