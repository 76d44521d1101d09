"""The trained policy out, as its family's Hugging Face folder: config.json, generation_config.json (every eos id
that ends a response), model.safetensors in the family's disk layout and the run's tokenizer files, so that
transformers' `AutoModelForCausalLM` loads it and vLLM serves it.

Every run's final checkpoint holds one (`checkpoints/<last step>/policy/`, written by the process that holds the
weights); any checkpoint can be exported afterwards:

    uv run python -m trainers.recipe.export runs/sync_ppo/<run>/checkpoints/<step> [--out DIR] [--dtype bfloat16]

which reads the checkpoint's backend state (`backend.safetensors`, or `trainer/backend.safetensors` in an async
run's checkpoint), the run's config.toml (the base checkpoint and the tokenizer it names) and writes `--out`
(default: `<checkpoint>/policy`). The chat template's options (`model.chat_template_options`) are arguments of a
render, not files: pass them to `apply_chat_template` when serving.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import torch
from moe_models import CharTokenizer, ChatTokenizer, load_config, save_weights
from rl_tasks.model_config import ModelConfig
from run_lifecycle import from_dict

from trainers.backend import BackendState

POLICY_DIR = "policy"
_STATE_FILES = ("backend.safetensors", "trainer/backend.safetensors")


def write_policy(
    folder: Path,
    weights: Mapping[str, torch.Tensor],
    base_dir: str | Path,
    tokenizer: ChatTokenizer | CharTokenizer,
    *,
    dtype: torch.dtype | None = None,
) -> Path:
    """`weights` (any layout `moe_models.save_weights` reads) as the base checkpoint's family, with `tokenizer`'s
    files; floating weights cast to `dtype` (None: their own). Returns `folder`."""
    config = load_config(base_dir)
    if dtype is not None:
        weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}
    return save_weights(weights, config, folder, tokenizer, stop_ids=tokenizer.stop_ids)


def checkpoint_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint folder's backend state (`model.<name>` tensors, any backend)."""
    for folder in (checkpoint, checkpoint / "trainer"):
        if (folder / "backend.safetensors").is_file():
            tensors = BackendState.load(folder).tensors
            return {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    raise ValueError(f"{checkpoint}: expected a checkpoint folder with {' or '.join(_STATE_FILES)}, got neither")


def run_base(run_dir: Path) -> tuple[Path, ChatTokenizer | CharTokenizer]:
    """The base checkpoint and the tokenizer of the run in `run_dir` (its config.toml): `model.path`, else the
    warm-up base (read from its cache, built again if the cache is gone)."""
    from trainers.recipe.setup import run_tokenizer

    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise ValueError(f"{run_dir}: expected a run directory with config.toml, got none")
    table = tomllib.loads(config_file.read_text())
    model = from_dict(ModelConfig, table.get("model", {}), source=f"{config_file} [model]")
    if model.path:
        return Path(model.path), run_tokenizer(model, model.path)
    from trainers.recipe.config import RecipeConfig
    from trainers.warmup import ensure_base_checkpoint

    shared = {k: v for k, v in table.items() if k in ("task", "warmup", "model", "run")}
    cfg = from_dict(RecipeConfig, shared, source=str(config_file))
    base = ensure_base_checkpoint(cfg.task, cfg.warmup, Path(cfg.run.warmup_cache), cfg.model)
    return base.checkpoint_dir, run_tokenizer(model, base.checkpoint_dir)


def export_checkpoint(checkpoint: Path, out: Path | None = None, dtype: torch.dtype | None = None) -> Path:
    """Writes the policy of `checkpoint` (a folder under a run's `checkpoints/`) to `out` (default:
    `<checkpoint>/policy`)."""
    weights = checkpoint_weights(checkpoint)
    base_dir, tokenizer = run_base(checkpoint.resolve().parent.parent)
    return write_policy(out or checkpoint / POLICY_DIR, weights, base_dir, tokenizer, dtype=dtype)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trainers.recipe.export",
        description="Writes a run's checkpoint as a Hugging Face folder (config, generation config, safetensors in the "
        "family's layout, tokenizer files) that transformers and vLLM load.",
    )
    parser.add_argument("checkpoint", type=Path, help="a checkpoint folder: <run dir>/checkpoints/<step>")
    parser.add_argument("--out", type=Path, default=None, help="the folder to write (default: <checkpoint>/policy)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=None, help="cast the weights")
    args = parser.parse_args(argv)
    try:
        path = export_checkpoint(args.checkpoint, args.out, None if args.dtype is None else getattr(torch, args.dtype))
    except ValueError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(f"export: wrote {path}")


if __name__ == "__main__":
    main()
