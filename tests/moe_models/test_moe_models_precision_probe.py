"""The precision probe names the first layer and op where two forwards diverge: a deliberately perturbed layer
is found, identical models diverge nowhere, and the report prints it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM
from moe_models.precision_probe import probe, read_probe, write_probe
from moe_models.precision_report import first_divergence, report

SEQS = [[1, 5, 9, 2, 7, 3, 3, 8], [1, 4, 4, 6]]


def _pair() -> tuple[MoEForCausalLM, MoEForCausalLM]:
    torch.manual_seed(0)
    trainer = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=32)).eval()
    return copy.deepcopy(trainer), trainer


def test_identical_forwards_diverge_nowhere():
    engine, trainer = _pair()
    diffs = probe(engine, trainer, SEQS)
    assert first_divergence(diffs, 1e-7) is None
    assert all(d.max_abs == 0 and d.flip_frac == 0 for d in diffs)


@pytest.mark.parametrize(
    ("layer", "module", "op"),
    [(2, "self_attn", "attn_out"), (1, "mlp.experts", "mlp_out"), (3, "mlp.gate", "router_logits")],
)
def test_a_perturbed_layer_is_named_with_its_op(layer: int, module: str, op: str):
    engine, trainer = _pair()
    with torch.no_grad():
        target = engine.model.layers[layer]
        for part in module.split("."):
            target = getattr(target, part)
        for p in target.parameters():
            if p.dim() >= 2:
                p.mul_(1.01)
    first = first_divergence(probe(engine, trainer, SEQS), 1e-4)
    assert first is not None and (first.layer, first.op) == (layer, op)


def test_a_bf16_engine_diverges_by_rounding_and_the_report_names_the_first_op(tmp_path: Path):
    engine, trainer = _pair()
    diffs = probe(engine.to(torch.bfloat16), trainer, SEQS)
    embed = next(d for d in diffs if d.op == "embed")
    assert 0 < embed.rel < 1e-2  # bf16 keeps ~3 significant digits
    write_probe(tmp_path, 3, diffs)
    assert read_probe(tmp_path / "debug" / "precision" / "step_3.jsonl") == diffs
    text = report(tmp_path, None, 1e-6)
    assert "step_3.jsonl: 2 samples" in text and "first divergence: layer -1 op embed" in text
    with pytest.raises(SystemExit, match=r"step_4\.jsonl"):
        report(tmp_path, 4, 1e-2)


@pytest.mark.parametrize(
    ("family", "module", "op"),
    [
        ("qwen2_moe", "mlp.shared_expert", "shared_out"),
        ("mixtral", "self_attn", "attn_out"),
        ("deepseek_v3", "self_attn", "attn_out"),  # MLA
        ("deepseek_v3", "mlp.shared_expert", "shared_out"),
        ("gpt_oss", "mlp.experts", "mlp_out"),
        ("gpt_oss", "mlp.gate", "router_logits"),
    ],
)
def test_every_family_is_traced_and_a_perturbed_op_named(family: str, module: str, op: str):
    torch.manual_seed(0)
    trainer = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=32, model_type=family)).eval()
    engine = copy.deepcopy(trainer)
    assert first_divergence(probe(engine, trainer, SEQS), 1e-7) is None
    with torch.no_grad():
        target = engine.model.layers[2]
        for part in module.split("."):
            target = getattr(target, part)
        for p in target.parameters():
            p.mul_(1.01)
    first = first_divergence(probe(engine, trainer, SEQS), 1e-4)
    assert first is not None and (first.layer, first.op) == (2, op)
