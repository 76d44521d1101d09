"""Supervised warm-up that turns a random tiny MoE into an RL base checkpoint for any task.

The checkpoint (HF format via `moe_models.save_pretrained`, with the task's tokenizer: `rl_tasks.task_tokenizer`)
is cached under `cache_root/warmup-<key>`, where `<key>` hashes the task's fingerprint, the tokenizer's files, the
model config, the warm-up config and a format version; it is rebuilt when missing. A build happens in a temporary
directory renamed into place only once complete (the metadata file `warmup.json` is its last file), so a crash never
leaves a half-written cached checkpoint.

Training sequences are the rendered prompt, then each piece of the task's demonstration, EOS after every trainable
piece (a model turn) and each observation as the prompt format encodes it (`rl_tasks.renderer.Renderer`); the loss
covers only the trainable pieces and their EOS tokens, never the prompt or an observation. A single-turn task's
demonstration is its answer, so its sequences are `prompt + answer + [eos]`. The base is scored by greedy decoding,
running the tool loop for a task with a tool. torch and moe_models are imported inside the functions, so importing
rl_tasks stays torch-free.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rl_tasks.episode import TaskTokenizer
from rl_tasks.example import TaskExample
from rl_tasks.model_config import ModelConfig
from rl_tasks.model_presets import full_vocab_presets
from rl_tasks.renderer import Renderer
from rl_tasks.task import Piece, Task, TaskBuilder
from rl_tasks.task_tokenizer import as_task, build_task_tokenizer, tokenizer_digest
from rollout_core.engine_registry import GREEDY_EVALUATORS, registered

if TYPE_CHECKING:
    import torch

_FORMAT_VERSION = 3
METADATA_FILE = "warmup.json"


@dataclass(frozen=True)
class WarmupConfig:
    """`steps` optimizer steps of `examples_per_step` train examples each; AdamW at `lr` after a linear ramp over
    `lr_warmup_steps`; the model it trains is a `ModelConfig`'s family and size preset. `torch_threads` sets torch's
    intra-op threads while warming up (None: leave torch's setting; 0: by the preset, `resolved`): 1 for the tiny
    preset, because on a shared 2-core machine a second thread made each of its steps several times slower
    (spinning), not faster; every usable core for the presets of production vocabulary, whose matmuls are large. A
    step whose padded batch (rows x longest row) exceeds `micro_batch_tokens` runs in length-sorted micro-batches
    with the same gradient (to float rounding), so long-tailed demonstrations do not all pad to the longest; a step
    that fits runs whole, exactly as without the setting. `experts_kernel` is the routed experts' autograd kernel
    (`moe_models.set_experts_kernel`); it changes results at float rounding only; `looped` is the faster one, most on
    long demonstrations (timings in docs/numerics.md).

    `dtype` is the precision the warm-up trains in (`auto`: by the preset, `resolved`: float64 for the tiny preset,
    float32 for the production-vocabulary ones, where float64 doubles the time and memory of a 151k-row head and
    the base need not be the same on every CPU); the checkpoint is always saved (and scored) in float32.
    float64 makes the base the same on every CPU: two CPUs whose kernels sum in different orders (AVX2 vs AVX-512,
    another BLAS blocking) round the same forward differently, and training grows that rounding step by step. In
    float32 one seed gave different bases (and accuracies) on different CPUs; in float64 rounding starts ~1e-9
    times smaller, and two differently-summed runs (the padded and looped kernels) end within an
    ulp of float32 of each other (docs/numerics.md)."""

    steps: int = field(default=150, metadata={"help": "supervised optimiser steps (0: the random model)"})
    examples_per_step: int = field(
        default=0, metadata={"help": "training examples per step (0: 64 for the tiny preset, 16 for small and base)"}
    )
    lr: float = field(default=2e-3, metadata={"help": "AdamW learning rate after the ramp"})
    lr_warmup_steps: int = field(default=20, metadata={"help": "steps of the linear learning-rate ramp"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW decoupled weight decay"})
    grad_clip: float = field(default=1.0, metadata={"help": "max global grad norm per step"})
    seed: int = field(default=0, metadata={"help": "seeds the model's initialisation and the example draws"})
    torch_threads: int | None = field(
        default=0,
        metadata={
            "help": "torch threads while warming up (none: leave the process's setting; 0: 1 for the tiny preset, "
            "every usable core for small and base)"
        },
    )
    experts_kernel: Literal["padded", "looped"] = field(
        default="looped",
        metadata={
            "help": "routed experts under autograd: padded (one zero-padded bmm) or looped (a matmul pair per expert)"
        },
    )
    micro_batch_tokens: int = field(
        default=4096,
        metadata={"help": "padded tokens (rows x longest row) per forward; a larger step runs in length-sorted parts"},
    )
    dtype: Literal["auto", "float64", "float32"] = field(
        default="auto",
        metadata={
            "help": "precision of the warm-up's training (float64: one base on every CPU; auto: float64 for the tiny "
            "preset, float32 for small and base); saved as float32"
        },
    )

    def __post_init__(self) -> None:
        if self.steps < 0 or self.examples_per_step < 0 or self.lr_warmup_steps < 0 or self.micro_batch_tokens < 1:
            raise ValueError(
                f"WarmupConfig: expected steps >= 0, examples_per_step >= 0, lr_warmup_steps >= 0, "
                f"micro_batch_tokens >= 1, got {self.steps}, {self.examples_per_step}, {self.lr_warmup_steps}, "
                f"{self.micro_batch_tokens}"
            )
        if not self.lr > 0 or not self.grad_clip > 0:
            raise ValueError(f"WarmupConfig: expected lr > 0 and grad_clip > 0, got {self.lr}, {self.grad_clip}")
        if self.torch_threads is not None and self.torch_threads < 0:
            raise ValueError(f"WarmupConfig.torch_threads: expected None or >= 0, got {self.torch_threads}")
        if self.dtype not in ("auto", "float64", "float32"):
            raise ValueError(f"warmup.dtype: expected 'auto', 'float64' or 'float32', got {self.dtype!r}")
        if self.experts_kernel not in ("padded", "looped"):
            raise ValueError(f"warmup.experts_kernel: expected 'padded' or 'looped', got {self.experts_kernel!r}")

    def resolved(self, preset: str) -> WarmupConfig:
        """`dtype` auto, `torch_threads` 0 and `examples_per_step` 0 made concrete for a model preset (see the
        class): a step of a production-vocabulary preset costs ~1 GFLOP per trained token in its head alone."""
        full = preset in full_vocab_presets()
        dtype = ("float32" if full else "float64") if self.dtype == "auto" else self.dtype
        cores = len(os.sched_getaffinity(0))
        threads = (cores if full else 1) if self.torch_threads == 0 else self.torch_threads
        examples = (16 if full else 64) if self.examples_per_step == 0 else self.examples_per_step
        return dataclasses.replace(self, dtype=dtype, torch_threads=threads, examples_per_step=examples)

    def cache_fields(self) -> dict[str, object]:
        """Fields that change the weights (`torch_threads` does not)."""
        d = dataclasses.asdict(self)
        del d["torch_threads"]
        return d


@dataclass(frozen=True)
class WarmupResult:
    """Where the base checkpoint is and how it was made. `train_wall_s` and the accuracies are those
    measured when it was built (read back from `warmup.json` when `cached`)."""

    checkpoint_dir: Path
    cached: bool
    key: str
    train_wall_s: float
    final_loss: float | None
    val_accuracy: float
    val_accuracy_by_source: dict[str, float]

    def to_json_dict(self) -> dict[str, object]:
        """The metadata stored beside the weights (the directory itself and `cached` are not stored)."""
        d = dataclasses.asdict(self)
        del d["checkpoint_dir"], d["cached"]
        return d


def turn_budget(task: Task) -> int:
    """The most tokens of one answer, EOS included: at most one token per UTF-8 byte of the longest answer."""
    return task.max_answer_chars * task.max_char_bytes + 1


def default_response_budget(task: Task) -> int:
    """A run's budget of one model turn when it sets none: the answer's, or the task's room to reason
    (`Task.response_tokens`) when that is larger."""
    return max(turn_budget(task), task.response_tokens)


def build_base_model_config(
    task: Task | TaskBuilder, warmup: WarmupConfig, tokenizer: TaskTokenizer, model: ModelConfig | None = None
) -> object:
    """The warm-up's MoE (`model`'s family at its size preset; default: the tiny Qwen3-MoE) sized to `tokenizer` (the
    task enters only through its tokenizer)."""
    from moe_models import MoEConfig
    from moe_models.full_vocab import FULL_VOCAB_ROWS

    model = model or ModelConfig()
    return MoEConfig.preset(
        model.preset,
        model_type=model.family,
        vocab_size=FULL_VOCAB_ROWS if model.preset in full_vocab_presets() else tokenizer.vocab_size,
        bos_token_id=tokenizer.bos_id,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.pad_id,
    )


def warmup_key(task: Task | TaskBuilder, warmup: WarmupConfig, model_config: object, tokenizer: object) -> str:
    """Hash of everything that determines the checkpoint's weights (`tokenizer`: by the files it saves)."""
    payload = {
        "format": _FORMAT_VERSION,
        "task": as_task(task).fingerprint(),
        "tokenizer": tokenizer_digest(tokenizer),  # type: ignore[arg-type]
        "warmup": warmup.cache_fields(),
        "model": _checkpoint_fields(model_config),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=list).encode()).hexdigest()[:20]


def _checkpoint_fields(model_config: object) -> dict[str, object]:
    """The model config's fields that describe the checkpoint (not the run's tokenizer size, which its files fix)."""
    fields = dataclasses.asdict(model_config)  # type: ignore[call-overload]
    del fields["tokenizer_vocab_size"]
    return fields


def encode_training_batch(
    renderer: Renderer,
    examples: Sequence[TaskExample],
    demonstration: Callable[[TaskExample], tuple[Piece, ...]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids [B, T], attention_mask [B, T] (right padding), loss_mask [B, T-1]: 1 where position t
    predicts a trainable token (target input_ids[:, t+1]), see `Renderer.demonstration`."""
    rows = [renderer.demonstration(ex, demonstration(ex)) for ex in examples]
    return pad_rows(rows, renderer.tokenizer.pad_id)


def pad_rows(
    rows: Sequence[tuple[list[int], list[float]]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`encode_demonstration` rows right-padded to the longest: input_ids, attention_mask, loss_mask."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for i, (row, mask) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
        loss_mask[i, : len(mask)] = torch.tensor(mask)
    return ids, attn, loss_mask


def _lr_at(step: int, cfg: WarmupConfig) -> float:
    if cfg.lr_warmup_steps == 0:
        return cfg.lr
    return cfg.lr * min(1.0, (step + 1) / cfg.lr_warmup_steps)


def micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Rows of a batch grouped so that each group's padded size (rows x longest row) is at most `budget`: the
    whole batch in input order when it fits, else the training step's split (`split_by_token_budget`: rows by
    decreasing length, ties by index, a row longer than `budget` alone). Long-tailed demonstrations then pad little
    instead of all to the longest."""
    if len(lengths) * max(lengths) <= budget:
        return [list(range(len(lengths)))]
    from trainers.backend.micro_batches import split_by_token_budget

    return split_by_token_budget(lengths, range(len(lengths)), budget)


def accumulate_gradients(
    model: torch.nn.Module, renderer: Renderer, batch: Sequence[TaskExample], task: Task, budget: int
) -> float:
    """Backpropagates the batch's mean loss per trainable token in micro-batches; returns that loss (nats)."""

    rows = [renderer.demonstration(ex, task.demonstration(ex)) for ex in batch]
    total = sum(sum(mask) for _, mask in rows)
    loss_sum = 0.0
    for group in micro_batches([len(ids) for ids, _ in rows], budget):
        ids, attn, loss_mask = pad_rows([rows[i] for i in group], renderer.tokenizer.pad_id)
        loss = (token_nll(model, ids, attn, loss_mask) * loss_mask).sum() / total
        loss.backward()
        loss_sum += float(loss.detach())
    return loss_sum


def token_nll(model: torch.nn.Module, ids: torch.Tensor, attn: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """`[b, T-1]` cross-entropy of each next token (where `loss_mask` `[b, T-1]` may be nonzero), in the model's
    dtype. Logits that fit one chunk of the chunked head (`moe_models.head_log_probs.HEAD_CHUNK_ELEMENTS`: every tiny
    model's batch) are computed whole, as the warm-up always has, so its float64 base stays bit for bit what it was;
    larger ones (a 151k-token vocabulary) come from the hidden states a chunk at a time, from each row's first loss
    position on, never as `[b, T, V]` (the same numbers to float rounding; 0 elsewhere)."""
    import torch
    from moe_models.head_log_probs import HEAD_CHUNK_ELEMENTS

    if ids.numel() * model.config.logit_vocab_size <= HEAD_CHUNK_ELEMENTS:
        logits = model(ids, attn).logits[:, :-1]  # [b, T-1, V]
        return torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
    first = (loss_mask > 0).to(torch.int64).argmax(dim=1)  # [b]: each row's first loss position (0: none)
    return -model.token_log_probs_at(ids, attn, None, logits_from=first, log_softmax=True).log_probs


def train_warmup(model: torch.nn.Module, renderer: Renderer, task: Task, cfg: WarmupConfig) -> float | None:
    """Runs `cfg.steps` supervised steps in place on demonstrations of `task.splits.train` (drawn with
    replacement, seeded by `cfg.seed`); returns the mean loss over the last 10 steps (nats per trainable
    token), or None when `cfg.steps` is 0."""
    import numpy as np
    import torch

    if cfg.steps and cfg.examples_per_step < 1:
        raise ValueError(f"train_warmup: expected a resolved WarmupConfig (WarmupConfig.resolved(preset)), got {cfg}")
    train = task.splits.train
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    model.train()
    losses: list[float] = []
    progress = _Progress(cfg.steps)
    for step in range(cfg.steps):
        batch = [train[i] for i in rng.integers(0, len(train), size=cfg.examples_per_step)]
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        opt.zero_grad(set_to_none=True)
        losses.append(accumulate_gradients(model, renderer, batch, task, cfg.micro_batch_tokens))
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        progress.step(step + 1, losses[-1])
    model.eval()
    tail = losses[-10:]
    return sum(tail) / len(tail) if tail else None


class _Progress:
    """A line on stderr every 10 s of a warm-up that will take over a minute (a production-size preset's: minutes);
    a short one prints nothing."""

    def __init__(self, steps: int) -> None:
        self.steps, self.t0 = steps, time.perf_counter()
        self.last = self.t0

    def step(self, done: int, loss: float) -> None:
        now = time.perf_counter()
        left = (now - self.t0) / done * (self.steps - done)
        if now - self.last >= 10.0 and now - self.t0 + left > 60.0:
            self.last = now
            print(f"warm-up: step {done}/{self.steps}, loss {loss:.3f}, ~{left / 60:.1f} min left", file=sys.stderr)


def _build(
    task: Task, warmup: WarmupConfig, model_config: object, renderer: Renderer, key: str, out_dir: Path
) -> WarmupResult:
    """Trains `model_config`'s model, evaluates and saves into `out_dir` (which must not exist); `warmup.json` is
    written last."""
    import torch
    from moe_models import MoEForCausalLM, save_pretrained, set_experts_kernel

    torch.manual_seed(warmup.seed)
    # initialised in float32, so both dtypes start from the same weights; it scores the tokenizer's ids only
    model = MoEForCausalLM(model_config.replace(tokenizer_vocab_size=renderer.tokenizer.vocab_size))  # type: ignore[attr-defined]
    set_experts_kernel(model, warmup.experts_kernel)
    t0 = time.perf_counter()
    final_loss = train_warmup(model.to(getattr(torch, warmup.dtype)), renderer, task, warmup)
    model = model.float()
    train_wall_s = time.perf_counter() - t0
    evaluate_greedy = registered(GREEDY_EVALUATORS, "native")  # the native engine: greedy decoding over its KV cache
    ev = evaluate_greedy(
        model,
        renderer,
        task.splits.validation,
        task.reward_fn,
        max_new_tokens=turn_budget(task),
        tool=task.tool,
    )
    save_pretrained(model, out_dir, renderer.tokenizer)  # type: ignore[arg-type]
    result = WarmupResult(out_dir, False, key, train_wall_s, final_loss, ev.accuracy, ev.accuracy_by_source)
    (out_dir / METADATA_FILE).write_text(json.dumps(result.to_json_dict(), indent=2, sort_keys=True) + "\n")
    return result


def _read_cached(path: Path, key: str) -> WarmupResult:
    meta = json.loads((path / METADATA_FILE).read_text())
    if meta["key"] != key:
        raise ValueError(f"{path / METADATA_FILE}: expected key {key}, got {meta['key']}")
    return WarmupResult(
        checkpoint_dir=path,
        cached=True,
        key=key,
        train_wall_s=float(meta["train_wall_s"]),
        final_loss=meta["final_loss"],
        val_accuracy=float(meta["val_accuracy"]),
        val_accuracy_by_source={str(k): float(v) for k, v in meta["val_accuracy_by_source"].items()},
    )


def ensure_base_checkpoint(
    task: Task | TaskBuilder,
    warmup: WarmupConfig,
    cache_root: str | Path = Path(".cache") / "warmup",
    model: ModelConfig | None = None,
) -> WarmupResult:
    """The cached base checkpoint for (task, warmup, model config), built first if missing. A task config is
    built first (`as_task`). `model`: the family and size to build (default: the tiny Qwen3-MoE); its `path` must be
    empty (a checkpoint the user brings is not warmed up)."""
    import torch

    if model is not None and model.path:
        raise ValueError(f"ensure_base_checkpoint: got model.path {model.path!r}, expected none (no warm-up for it)")
    task = as_task(task)
    cache_root = Path(cache_root)
    preset = model.preset if model is not None else "tiny"
    warmup = warmup.resolved(preset)
    tokenizer = build_task_tokenizer(task, preset)
    model_config = build_base_model_config(task, warmup, tokenizer, model)
    key = warmup_key(task, warmup, model_config, tokenizer)
    final = cache_root / f"warmup-{key}"
    if (final / METADATA_FILE).is_file():
        return _read_cached(final, key)
    if final.exists():
        raise ValueError(
            f"{final}: exists without {METADATA_FILE}; expected a complete cached checkpoint or none "
            "(it was not written by ensure_base_checkpoint: delete it to rebuild)"
        )
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = cache_root / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    threads = torch.get_num_threads()
    try:
        if warmup.torch_threads is not None:
            torch.set_num_threads(warmup.torch_threads)
        renderer = Renderer(tokenizer, task.prompt_format)  # type: ignore[arg-type]
        result = _build(task, warmup, model_config, renderer, key, tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / METADATA_FILE).is_file():
                raise
            return _read_cached(final, key)  # another process finished the same build first
    finally:
        torch.set_num_threads(threads)
        shutil.rmtree(tmp, ignore_errors=True)
    return dataclasses.replace(result, checkpoint_dir=final)
