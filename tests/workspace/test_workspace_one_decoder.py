"""The decoder's forward is written once: `moe_models.decoder_layer.DecoderLayer.forward` is the only function in the
workspace's packages that calls an attention op and then a feed-forward op (a decoder layer). The engine's prefill,
decode step and compiled decode, true on-policy mode and the precision probe run that function under their own
forward contexts instead of a copy of it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ATTENTION_OPS = {
    "self_attn",
    "attn",
    "attention",
    "attend",
    "_attend",
    "_attention",
    "cached_attention",
    "decode_attention",
    "invariant_attention",
    "scaled_dot_product_attention",
}
FEED_FORWARD_OPS = {
    "mlp",
    "ffn",
    "experts",
    "_experts",
    "add_mlp",
    "add_experts",
    "feed_forward",
    "_feed_forward",
    "moe_experts",
    "grouped_experts",
    "routed_experts",
    "invariant_experts",
}


def _called(fn: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def decoder_forwards(source: str) -> list[str]:
    """Names of the functions (constructors aside) in `source` that call an attention op and a feed-forward op."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name != "__init__":
            called = _called(node)
            if called & ATTENTION_OPS and called & FEED_FORWARD_OPS:
                out.append(node.name)
    return out


def test_one_function_of_the_workspace_runs_a_decoder_layer():
    found = {
        (str(path.relative_to(ROOT)), name)
        for path in sorted((ROOT / "packages").glob("*/src/**/*.py"))
        for name in decoder_forwards(path.read_text())
    }
    assert found == {("packages/moe-models/src/moe_models/decoder_layer.py", "forward")}, found


def test_the_scan_finds_a_second_formulation_of_a_layer():
    copy = """
def decode_layers(layers, h):
    for layer in layers:
        h = h + _attention(layer, h)
        h = _feed_forward(layer, h)
    return h
"""
    assert decoder_forwards(copy) == ["decode_layers"]
