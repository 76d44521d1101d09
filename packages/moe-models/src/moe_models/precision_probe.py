"""The precision probe: the engine's forward and the trainer's forward of the same responses, compared op by op.

Each side runs its own weights in its own dtype through the model's forward (`moe_models.forward_trace`), routing
by itself, on the response's full sequence (prompt + response). The engine side is the engine's model object
(`rollout.engine.kind native`); the trainer side is the training backend's model, under its compute dtype. A record
per (sample, layer, op): `max_abs`, `mean_abs` and `rel` (= max_abs / max |trainer|), and for `topk` the fraction
of tokens whose expert set differs (`flip_frac`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from moe_models.forward_trace import TracePoint, trace_forward
from moe_models.model import MoEForCausalLM

FOLDER = Path("debug") / "precision"


@dataclass(frozen=True)
class OpDiff:
    sample: int
    layer: int
    op: str
    max_abs: float
    mean_abs: float
    rel: float
    flip_frac: float  # topk only: tokens whose expert set differs (0 elsewhere)

    def diverged(self, tolerance: float) -> bool:
        return self.flip_frac > 0 if self.op == "topk" else self.rel > tolerance


def compare(sample: int, engine: Sequence[TracePoint], trainer: Sequence[TracePoint]) -> list[OpDiff]:
    """Both traces of one sequence, in forward order."""
    if [(p.layer, p.op) for p in engine] != [(p.layer, p.op) for p in trainer]:
        raise ValueError("precision probe: expected both forwards to record the same ops, got different ones")
    out = []
    for e, t in zip(engine, trainer, strict=True):
        if e.op == "topk":
            flips = float((e.value != t.value).any(dim=-1).float().mean())
            out.append(OpDiff(sample, e.layer, e.op, 0.0, 0.0, 0.0, flips))
            continue
        diff = (e.value - t.value).abs()
        scale = float(t.value.abs().max()) or 1.0
        out.append(OpDiff(sample, e.layer, e.op, float(diff.max()), float(diff.mean()), float(diff.max()) / scale, 0.0))
    return out


def probe(
    engine_model: MoEForCausalLM,
    trainer_model: MoEForCausalLM,
    sequences: Sequence[Sequence[int]],
    layers: Iterable[int] | None = None,
    trainer_autocast: AbstractContextManager[object] | None = None,
) -> list[OpDiff]:
    """Every sequence (token ids) through both models; `trainer_autocast` wraps the trainer's forward (bf16
    compute)."""
    wanted = list(layers) if layers else None
    out: list[OpDiff] = []
    for i, seq in enumerate(sequences):
        ids = torch.tensor([list(seq)], dtype=torch.int64)
        engine = trace_forward(engine_model, ids.to(next(engine_model.parameters()).device), wanted)
        with trainer_autocast or nullcontext():
            trainer = trace_forward(trainer_model, ids.to(next(trainer_model.parameters()).device), wanted)
        out += compare(i, engine, trainer)
    return out


def write_probe(run_root: Path, step: int, diffs: Sequence[OpDiff]) -> Path:
    path = run_root / FOLDER / f"step_{step}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": step} | asdict(d)) + "\n" for d in diffs))
    return path


def read_probe(path: Path) -> list[OpDiff]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [OpDiff(**{k: v for k, v in r.items() if k != "step"}) for r in rows]
