"""SGLangEngine: `rollout_core.Engine` over SGLang's native HTTP API (token ids in and out).

SGLang does not run on this project's CPU machines: this adapter is exercised here against an in-process fake
server that speaks SGLang's wire format as its source defines it (tests/engine_adapters), and against a real
SGLang only by `scripts/gpu_check_adapters.sh` on a GPU.

- each call gets a fresh rid `<request_id>.<n>`; `abort` posts `/abort_request` (repeated until the call
  returns, since an abort that reaches SGLang before the request is a no-op) and after `abort_grace_s` closes
  the connection (SGLang then aborts, and the call returns `abort` with no tokens);
- log-probs are `meta_info.output_token_logprobs`; SGLang's default is the distribution after temperature
  scaling (the one tokens are sampled from), unless the server sets SGLANG_RETURN_ORIGINAL_LOGPROB;
- routed experts are SGLang's `return_routed_experts` rows (int32) from `routed_experts_start_len`, returned
  also for aborted calls; a release that returns N rows instead of N-1 has its last row dropped;
- weight versions are decimal labels set by `update_weights_from_disk(weight_version=...)`; the label the
  server started with (e.g. "default") counts as version 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import numpy as np
from rollout_core import SamplingParams, Segment, check_prompt
from routing_state import RoutingSpec, routing_spec

from engine_adapters.padding_bias import padding_bias
from engine_adapters.routing_rows import decode_int32_base64, normalise_rows
from engine_adapters.sglang.client import SGLangClient, SGLangPauseMode
from engine_adapters.sglang.response import SGLangResponse


@dataclass(frozen=True)
class ModelShape:
    """What the adapter needs from the served model's HF `config.json`."""

    vocab_size: int
    max_context: int
    routing_spec: RoutingSpec | None

    @classmethod
    def from_hf_config(cls, model_dir: str | Path, max_context: int | None = None) -> ModelShape:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        return cls(int(cfg["vocab_size"]), int(max_context or cfg["max_position_embeddings"]), routing_spec(cfg))


@dataclass
class _Call:
    rid: str
    task: asyncio.Task[dict[str, object]]
    abort_requested: bool = False
    cut: bool = False


class SGLangEngine:
    """See the module docstring. Build with `await SGLangEngine.connect(url, shape)`."""

    def __init__(
        self, client: SGLangClient, shape: ModelShape, *, initial_label: str, abort_grace_s: float = 5.0
    ) -> None:
        self.client = client
        self.vocab_size = shape.vocab_size
        self._logit_bias: dict[str, float] = {}
        self.max_context = shape.max_context
        self._spec = shape.routing_spec
        self._labels = {} if initial_label.isdigit() else {initial_label: 0}
        self._version = int(initial_label) if initial_label.isdigit() else 0
        self.abort_grace_s = abort_grace_s
        self._seq = 0
        self._calls: dict[str, _Call] = {}
        self._background: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(cls, base_url: str, shape: ModelShape, *, abort_grace_s: float = 5.0) -> Self:
        client = SGLangClient(base_url)
        try:
            label = await client.weight_version()
        except BaseException:
            await client.aclose()
            raise
        return cls(client, shape, initial_label=label, abort_grace_s=abort_grace_s)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await self.client.aclose()

    @property
    def weight_version(self) -> int:
        return self._version

    @property
    def routing_spec(self) -> RoutingSpec | None:
        return self._spec

    def sample_only(self, tokenizer_size: int | None) -> None:
        """Never samples an id at or beyond `tokenizer_size` (the checkpoint's padding rows; None: every row is a
        token), through SGLang's per-request `logit_bias` (`engine_adapters.padding_bias`). Not yet run against a
        real SGLang server (none runs on a CPU): whether its returned log-probs include the bias is unchecked."""
        self._logit_bias = padding_bias(tokenizer_size, self.vocab_size)

    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        check_prompt(prompt_ids, params, vocab_size=self.vocab_size, max_context=self.max_context)

    def _body(self, rid: str, prompt_ids: list[int], params: SamplingParams) -> dict[str, object]:
        sampling: dict[str, object] = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k if params.top_k > 0 else -1,  # SGLang: -1 is the whole vocabulary
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": params.ignore_eos,
            "no_stop_trim": True,  # keep a matched stop token in output_ids
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        if self._logit_bias:
            sampling["logit_bias"] = self._logit_bias
        want_rows = self._spec is not None and params.return_routed_experts
        return {
            "rid": rid,
            "input_ids": [int(t) for t in prompt_ids],
            "sampling_params": sampling,
            "return_logprob": True,
            "return_routed_experts": want_rows,
            "routed_experts_start_len": params.routed_experts_start if want_rows else 0,
            "stream": False,
        }

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment:
        self._validate(prompt_ids, params)
        if request_id in self._calls:
            raise ValueError(f"request_id {request_id!r} is already running")
        self._seq += 1
        rid = f"{request_id}.{self._seq}"
        call = _Call(rid, asyncio.create_task(self.client.generate(self._body(rid, prompt_ids, params))))
        self._calls[request_id] = call
        try:
            try:
                body = await call.task
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not call.cut or (task is not None and task.cancelling()):
                    raise
                return Segment([], [], "abort", self._version)  # connection closed: SGLang kept the tokens
            resp = SGLangResponse.parse(body, self._labels)  # type: ignore[arg-type]
            return self._segment(resp, len(prompt_ids), params)
        finally:
            del self._calls[request_id]

    def _segment(self, resp: SGLangResponse, context_len: int, params: SamplingParams) -> Segment:
        g = len(resp.token_ids)
        rows: np.ndarray | None = None
        if self._spec is not None and params.return_routed_experts and g and resp.routed_experts_b64 is not None:
            raw = decode_int32_base64(resp.routed_experts_b64, self._spec)
            rows = normalise_rows(
                raw, self._spec, context_len=context_len, num_generated=g, start=params.routed_experts_start
            )
        versions = resp.token_versions
        return Segment(
            token_ids=resp.token_ids,
            log_probs=resp.log_probs,
            stop_reason=resp.stop_reason,
            weight_version=versions[0] if versions else self._version,
            token_versions=versions if len(set(versions)) > 1 else None,
            routed_experts=rows,
            routed_experts_start=params.routed_experts_start if rows is not None else 0,
        )

    async def abort(self, request_id: str) -> bool:
        call = self._calls.get(request_id)
        if call is None:
            return False
        if not call.abort_requested:
            call.abort_requested = True
            await self.client.abort(call.rid)
            task = asyncio.create_task(self._abort_until_done(call))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return True

    async def _abort_until_done(self, call: _Call) -> None:
        deadline = asyncio.get_running_loop().time() + self.abort_grace_s
        while not call.task.done() and asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(Exception):  # timeout, or the call failed (generate reports that)
                await asyncio.wait_for(asyncio.shield(call.task), 0.2)
            if not call.task.done():
                await self.client.abort(call.rid)
        if not call.task.done():
            call.cut = True
            call.task.cancel()

    async def pause(self, mode: SGLangPauseMode = "retract") -> None:
        await self.client.pause(mode)

    async def resume(self) -> None:
        await self.client.resume()

    async def update_weights(self, weights_dir: str, version: int, *, pause_mode: SGLangPauseMode = "retract") -> None:
        """pause(mode) -> /update_weights_from_disk(weight_version=str(version)) -> /continue_generation.

        The KV cache is flushed unless `pause_mode == "in_place"` (SGLang refuses to flush with requests kept in
        place); `abort` and `retract` re-prefill in-flight prompts under the new weights.
        """
        if version <= self._version:
            raise ValueError(f"version: expected > current weight version {self._version}, got {version}")
        await self.client.pause(pause_mode)
        try:
            await self.client.update_weights_from_disk(weights_dir, str(version), flush_cache=pause_mode != "in_place")
            self._version = version
        finally:
            await self.client.resume()
