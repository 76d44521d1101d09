"""The cached FlowGRPO starting point: the warmed-up base velocity model and the reward classifier, each built
once per config under `cache_root/<name>-<key>` (`key` hashes the config and a format version) and reused.

A build writes into a temporary folder renamed into place only when complete (`meta.json` is written last), so an
interrupted build never leaves a half-written entry; a concurrent build of the same key loses the rename race
harmlessly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from flow_models.classifier import DigitClassifier, train_classifier
from flow_models.digits import DigitSplits
from flow_models.reward_config import ClassifierConfig
from flow_models.velocity import VelocityMLP
from flow_models.velocity_config import VelocityConfig
from flow_models.warmup import warm_up
from flow_models.warmup_config import FlowWarmupConfig

FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
META = "meta.json"


def cache_key(*configs: object) -> str:
    payload = json.dumps([FORMAT_VERSION, *[dataclasses.asdict(c) for c in configs]], sort_keys=True)  # type: ignore[call-overload]
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def _store(folder: Path, model: torch.nn.Module, meta: dict[str, object]) -> None:
    tmp = folder.with_name(f".tmp-{folder.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / WEIGHTS))
    (tmp / META).write_text(json.dumps(meta, indent=1) + "\n")
    try:
        tmp.rename(folder)
    except OSError:  # another process finished the same key first: theirs is identical
        shutil.rmtree(tmp, ignore_errors=True)


def _load(folder: Path, model: torch.nn.Module) -> dict[str, object]:
    model.load_state_dict(load_file(str(folder / WEIGHTS)), strict=True)
    return json.loads((folder / META).read_text())


def _classifier_fields(cfg: ClassifierConfig) -> dict[str, object]:
    """The training settings alone (a `classifier` reward section is one, with its `kind` tag): the cache key."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ClassifierConfig)}


def ensure_classifier(cfg: ClassifierConfig, data: DigitSplits, cache_root: Path) -> tuple[DigitClassifier, float]:
    """The reward classifier (eval mode, frozen) and its validation accuracy in [0, 1]."""
    folder = cache_root / f"classifier-{cache_key(ClassifierConfig(**_classifier_fields(cfg)))}"
    model = DigitClassifier(cfg.hidden)
    if not (folder / META).exists():
        t0 = time.perf_counter()
        trained, acc = train_classifier(cfg, data)
        _store(
            folder,
            trained,
            {"val_accuracy": acc, "build_s": time.perf_counter() - t0, "config": dataclasses.asdict(cfg)},
        )
    meta = _load(folder, model)
    return model.eval().requires_grad_(False), float(meta["val_accuracy"])  # type: ignore[arg-type]


def ensure_base(model_cfg: VelocityConfig, cfg: FlowWarmupConfig, data: DigitSplits, cache_root: Path) -> VelocityMLP:
    """The warmed-up base velocity model (a fresh module, train mode)."""
    folder = cache_root / f"flow-base-{cache_key(model_cfg, cfg)}"
    if not (folder / META).exists():
        t0 = time.perf_counter()
        trained, loss = warm_up(model_cfg, cfg, data)
        _store(folder, trained, {"final_loss": loss, "build_s": time.perf_counter() - t0})
    model = VelocityMLP(model_cfg)
    _load(folder, model)
    return model
