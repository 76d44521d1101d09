"""VLLMEngine: `rollout_core.Engine` over a vLLM server's HTTP API (token ids in and out, no tokenizer here).

- generation streams `/inference/v1/generate`, so the tokens produced before an abort are known client-side;
  log-probs are vLLM's `processed_logprobs` (the server runs with `--logprobs-mode processed_logprobs`), i.e.
  under `softmax(logits / T)` (raw logits when greedy), renormalised after top-k/top-p when those are on;
- each call gets a fresh engine-side id `<request_id>.<n>` (resumed calls reuse the caller's id); vLLM names it
  `generate-tokens-<id>` and internally `generate-tokens-<id>-<8 hex>`; aborts use the middle form;
- per-token weight versions come from vLLM's `weight_versions` spans; version labels are decimal integers that
  this adapter sets with `/update_weight_version`;
- routed experts come from our worker extension's router capture (`routing="extension"`, the CPU path; rows
  survive aborts) or from vLLM's own `--enable-return-routed-experts` (`routing="native"`, GPU; finished calls
  only). Both are cut to the N-1 rows of the routing rule (one per input position) from
  `params.routed_experts_start`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field
from typing import Self

import httpx
import numpy as np
from rollout_core import SamplingParams, Segment, StopReason, check_prompt
from routing_state import RoutingSpec

from engine_adapters.routing_rows import decode_npy_base64, normalise_rows, rows_from_positions
from engine_adapters.vllm.client import PauseMode, VLLMClient
from engine_adapters.vllm.response import ResponseStatus, VLLMResponse
from engine_adapters.vllm.server import RoutingSource, VLLMServerError

ENGINE_ID_PREFIX = "generate-tokens-"  # vllm/entrypoints/scale_out/token_in_token_out/serving.py


def engine_request_id(call_id: str) -> str:
    """The id vLLM's API server gives the engine for a `/inference/v1/generate` call with `request_id=call_id`."""
    return f"{ENGINE_ID_PREFIX}{call_id}"


@dataclass
class _Call:
    """One in-flight `generate` call."""

    request_id: str
    call_id: str
    version_at_start: int
    updates_at_start: int
    response: VLLMResponse = field(default_factory=VLLMResponse)
    reader: asyncio.Task[None] | None = None
    abort_requested: bool = False
    cut: bool = False  # we closed the stream after the abort grace period

    @property
    def engine_id(self) -> str:
        return engine_request_id(self.call_id)


class VLLMEngine:
    """See the module docstring. Build with `await VLLMEngine.connect(url)`; close with `await engine.close()`."""

    def __init__(
        self,
        client: VLLMClient,
        *,
        vocab_size: int,
        max_context: int,
        routing_spec: RoutingSpec | None,
        routing: RoutingSource,
        weight_version: int,
        abort_grace_s: float = 0.5,
    ) -> None:
        if routing not in ("extension", "native", "none"):
            raise ValueError(f"routing: expected 'extension', 'native' or 'none', got {routing!r}")
        if routing != "none" and routing_spec is None:
            raise ValueError(f"routing={routing!r} needs a RoutingSpec (an MoE model), got None")
        self.client = client
        self.vocab_size = vocab_size
        self.max_context = max_context
        self.routing = routing
        self.abort_grace_s = abort_grace_s
        self._spec = routing_spec if routing != "none" else None
        self._version = weight_version
        self._updates = 0
        self._seq = 0
        self._calls: dict[str, _Call] = {}
        self._background: set[asyncio.Task[None]] = set()

    async def sample_only(self, tokenizer_size: int | None) -> None:
        """Never samples an id at or beyond `tokenizer_size` (the checkpoint's padding rows; None: every row is a
        token): the server's worker extension sets those logits to -inf (`rl_sample_only`), so the sampled
        log-probs, like the trainer's, are normalised over the tokenizer's ids."""
        if tokenizer_size is not None and tokenizer_size < self.vocab_size:
            await self.client.collective_rpc("rl_sample_only", str(tokenizer_size))

    @classmethod
    async def connect(cls, base_url: str, *, routing: RoutingSource = "extension", abort_grace_s: float = 0.5) -> Self:
        """Attaches to a server launched with our worker extension; labels its weights version 0 if unlabelled."""
        client = VLLMClient(base_url)
        try:
            method = "rl_capture_enable" if routing == "extension" else "rl_model_info"
            info = (await client.collective_rpc(method))[0]
            spec = None
            if info["num_moe_layers"] and routing != "none":
                layers = tuple(info["moe_layers"]) if "moe_layers" in info else None
                spec = RoutingSpec(info["num_moe_layers"], info["top_k"], info["num_experts"], layers)
            label = await client.weight_version()
            if label is None or not label.isdigit():
                await client.update_weight_version("0")
                label = "0"
            return cls(
                client,
                vocab_size=int(info["vocab_size"]),
                max_context=await client.max_model_len(),
                routing_spec=spec,
                routing=routing,
                weight_version=int(label),
                abort_grace_s=abort_grace_s,
            )
        except BaseException:
            await client.aclose()
            raise

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

    def progress(self, request_id: str) -> int | None:
        """Tokens received so far by the in-flight call `request_id`; None when no such call is running.

        What this process has read, not what vLLM has generated: a client starved of CPU reads late (by a whole
        generation while vLLM's busy-waiting server had the CPU, before `cpu_priority`), and a pause or abort it
        sends then may find the call already finished.
        """
        call = self._calls.get(request_id)
        return None if call is None else len(call.response.token_ids)

    # ------------------------------------------------------------------ generation
    def _validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        check_prompt(
            prompt_ids,
            params,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            context="the server's max_model_len",
        )

    def _body(self, call: _Call, prompt_ids: list[int], params: SamplingParams) -> dict[str, object]:
        sampling: dict[str, object] = {
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k,
            "stop_token_ids": list(params.stop_token_ids),
            "ignore_eos": params.ignore_eos,
            "logprobs": 0,  # the sampled token's log-prob only
            "detokenize": False,
        }
        if params.seed is not None:
            sampling["seed"] = params.seed
        if self.routing == "native":
            sampling["routed_experts_prompt_start"] = params.routed_experts_start
        return {
            "request_id": call.call_id,
            "token_ids": [int(t) for t in prompt_ids],
            "sampling_params": sampling,
            "stream": True,
            "output_mode": "tokens",
        }

    async def _read(self, call: _Call, body: dict[str, object]) -> None:
        async with self.client.generate_lines(body) as lines:
            async for line in lines:
                call.response.add_line(line)

    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> Segment:
        self._validate(prompt_ids, params)
        if request_id in self._calls:
            raise ValueError(f"request_id {request_id!r} is already running")
        self._seq += 1
        call = _Call(request_id, f"{request_id}.{self._seq}", self._version, self._updates)
        self._calls[request_id] = call
        try:
            call.reader = asyncio.create_task(self._read(call, self._body(call, prompt_ids, params)))
            try:
                await call.reader
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not call.cut or (task is not None and task.cancelling()):
                    raise  # our caller was cancelled: the reader is cancelled too, closing the stream aborts it
            return await self._segment(call, len(prompt_ids), params)
        finally:
            del self._calls[request_id]

    async def _segment(self, call: _Call, context_len: int, params: SamplingParams) -> Segment:
        resp = call.response
        if resp.status != ResponseStatus.FINISHED and not call.abort_requested:
            raise VLLMServerError(f"vLLM stream for {call.engine_id} ended without a finish_reason")
        same_weights = self._updates == call.updates_at_start
        versions = resp.token_versions(call.version_at_start if same_weights else None)
        rows = await self._rows(call, context_len, params)
        return Segment(
            token_ids=list(resp.token_ids),
            log_probs=list(resp.log_probs),
            stop_reason=resp.stop_reason,
            weight_version=versions[0] if versions else self._version,
            token_versions=versions if len(set(versions)) > 1 else None,
            routed_experts=rows,
            routed_experts_start=params.routed_experts_start if rows is not None else 0,
        )

    async def _rows(self, call: _Call, context_len: int, params: SamplingParams) -> np.ndarray | None:
        resp, spec, g = call.response, self._spec, len(call.response.token_ids)
        if self.routing == "extension":
            full = await self._pop_rows(call.engine_id)  # always popped: the worker must not keep them
            if spec is None or not params.return_routed_experts or g == 0:
                return None
            rows = (
                None
                if full is None
                else rows_from_positions(
                    full, spec, context_len=context_len, num_generated=g, start=params.routed_experts_start
                )
            )
            if rows is None and resp.stop_reason != StopReason.ABORT:
                have = 0 if full is None else full.shape[0]
                raise VLLMServerError(
                    f"routing capture for {call.engine_id}: {have} rows, expected {context_len + g - 1} "
                    "(is prefix caching off and the model eager?)"
                )
            return rows
        if spec is None or not params.return_routed_experts or g == 0 or resp.routed_experts_b64 is None:
            return None
        raw = decode_npy_base64(resp.routed_experts_b64)
        return normalise_rows(raw, spec, context_len=context_len, num_generated=g, start=params.routed_experts_start)

    async def _pop_rows(self, engine_id: str) -> np.ndarray | None:
        result = (await self.client.collective_rpc("rl_routing_pop", engine_id))[0]
        if result is None:
            return None
        data = base64.b64decode(result["data"])
        shape = (int(result["num_rows"]), int(result["num_layers"]), int(result["top_k"]))
        return np.frombuffer(data, dtype="<i4").reshape(shape)

    # ------------------------------------------------------------------ control
    async def abort(self, request_id: str) -> bool:
        """Starts aborting the call and returns at once; the call then returns `abort` with its tokens so far.

        vLLM is asked by id (`/abort_requests`, repeated every 0.1 s: an abort that reaches vLLM before the request
        does is a no-op); if the stream has not ended `abort_grace_s` after this call (e.g. a starved API server),
        the adapter closes it, which vLLM also treats as an abort. A closed stream carries no `weight_versions`:
        its tokens get the version of the call's start, and if weights changed meanwhile the call raises.
        """
        call = self._calls.get(request_id)
        if call is None:
            return False
        if not call.abort_requested:
            call.abort_requested = True
            task = asyncio.create_task(self._abort_until_done(call))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return True

    async def _abort_until_done(self, call: _Call) -> None:
        reader = call.reader
        if reader is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.abort_grace_s
        while not reader.done() and loop.time() < deadline:
            # a failed or slow abort request is not fatal: closing the stream below aborts too
            with contextlib.suppress(TimeoutError, httpx.HTTPError, VLLMServerError, ValueError):
                await asyncio.wait_for(self.client.abort([call.engine_id]), max(deadline - loop.time(), 0.01))
            with contextlib.suppress(Exception):  # timeout, or the reader failed (generate reports that)
                await asyncio.wait_for(asyncio.shield(reader), min(0.1, max(deadline - loop.time(), 0.0)))
        if not reader.done():
            call.cut = True
            reader.cancel()

    async def pause(self, mode: PauseMode = "keep") -> None:
        """`keep`: in-flight calls freeze and continue after `resume`; `abort`: they return `abort`; `wait`:
        pauses once they finished."""
        await self.client.pause(mode)

    async def resume(self) -> None:
        await self.client.resume()

    async def update_weights(self, weights_dir: str, version: int, *, pause_mode: PauseMode = "keep") -> None:
        """Loads the trainer's safetensors from `weights_dir` (HF names) as weight version `version`.

        Sequence: pause(mode) -> reload + CPU MoE re-pack (worker extension) -> update_weight_version ->
        prefix-cache reset -> resume (also when a step failed, before re-raising).
        """
        if version <= self._version:
            raise ValueError(f"version: expected > current weight version {self._version}, got {version}")
        await self.client.pause(pause_mode)
        try:
            await self.client.collective_rpc("rl_reload_weights", weights_dir)
            await self.client.update_weight_version(str(version))
            self._version = version
            self._updates += 1
            if not await self.client.reset_prefix_cache():
                raise VLLMServerError(
                    "vLLM could not reset its prefix cache after the weight update (blocks still held by "
                    f"running requests under pause mode {pause_mode!r}); cached prefixes may be stale"
                )
        finally:
            await self.client.resume()
