"""VLLMResponse: one `/inference/v1/generate` stream (vLLM >= 0.32, `--enable-scale-out`) folded into a record.

Wire format (vllm/entrypoints/scale_out/token_in_token_out/protocol.py, `GenerateTokensStreamResponse`): SSE
lines `data: {json}` ending with `data: [DONE]`; each chunk has `choices[0]` with the NEW `token_ids`,
`logprobs.content[i].logprob` for each of them, `finish_reason` (null until the last chunk: `stop`, `length`,
`abort`, or `error`), and on the last chunk `weight_versions` (`[{version, start, end}]` spans over output
tokens, covering the whole output) and `routed_experts` (base64 `.npy`, only with
`--enable-return-routed-experts`). An error arrives as a chunk with an `error` object.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from rollout_core import StopReason


class ResponseStatus(enum.StrEnum):
    STREAMING = "streaming"  # chunks still arriving
    FINISHED = "finished"  # a chunk carried a finish_reason
    CUT = "cut"  # the stream ended (or was closed by us) without a finish_reason


class VLLMGenerateError(RuntimeError):
    """The server reported an error inside the stream (not a client mistake: those are HTTP 400 -> ValueError)."""


_FINISH = {"stop": StopReason.STOP, "length": StopReason.LENGTH, "abort": StopReason.ABORT}


def parse_versions(spans: list[dict[str, Any]], num_tokens: int) -> list[int]:
    """One integer weight version per output token from vLLM's `weight_versions` spans.

    Spans must tile `[0, num_tokens)` in order; versions are the strings our adapter set (decimal ints).
    """
    out: list[int] = []
    for span in spans:
        start, end, raw = int(span["start"]), int(span["end"]), span["version"]
        if start != len(out) or end < start:
            raise ValueError(f"weight_versions: expected contiguous spans from 0, got {spans}")
        try:
            version = int(raw)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"weight_versions: expected integer version labels, got {raw!r}") from exc
        out.extend([version] * (end - start))
    if len(out) != num_tokens:
        raise ValueError(f"weight_versions: spans cover {len(out)} tokens, the output has {num_tokens}: {spans}")
    return out


@dataclass
class VLLMResponse:
    """Tokens and log-probs received so far for one call; `add_line` folds in one SSE line."""

    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    status: ResponseStatus = ResponseStatus.STREAMING
    finish_reason: str | None = None
    weight_versions: list[dict[str, Any]] | None = None
    routed_experts_b64: str | None = None

    def add_line(self, line: str) -> None:
        line = line.strip()
        if not line or line.startswith(":"):
            return
        if not line.startswith("data:"):
            raise ValueError(f"vLLM stream: expected SSE 'data:' lines, got {line[:80]!r}")
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            if self.status == ResponseStatus.STREAMING:
                self.status = ResponseStatus.CUT
            return
        self.add_chunk(json.loads(payload))

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            raise VLLMGenerateError(f"vLLM reported an error during generation: {chunk['error']}")
        for choice in chunk.get("choices", []):
            if choice.get("index", 0) != 0:
                raise ValueError(f"vLLM stream: expected one choice (n=1), got index {choice['index']}")
            self._add_choice(choice)

    def _add_choice(self, choice: dict[str, Any]) -> None:
        ids = [int(t) for t in choice.get("token_ids") or []]
        content = (choice.get("logprobs") or {}).get("content") or []
        if len(content) != len(ids):
            raise ValueError(f"vLLM stream: {len(ids)} new tokens but {len(content)} log-probs (request logprobs=0)")
        for tok, entry in zip(ids, content, strict=True):
            if int(entry["token_id"]) != tok:
                raise ValueError(f"vLLM stream: log-prob for token {entry['token_id']}, expected token {tok}")
        self.token_ids.extend(ids)
        self.log_probs.extend(float(e["logprob"]) for e in content)
        if choice.get("weight_versions") is not None:
            self.weight_versions = list(choice["weight_versions"])
        if choice.get("routed_experts") is not None:
            self.routed_experts_b64 = str(choice["routed_experts"])
        reason = choice.get("finish_reason")
        if reason is not None:
            if reason == "error":
                raise VLLMGenerateError("vLLM finished the request with finish_reason 'error'")
            if reason not in _FINISH:
                raise ValueError(f"vLLM stream: unknown finish_reason {reason!r}, expected one of {sorted(_FINISH)}")
            self.finish_reason = reason
            self.status = ResponseStatus.FINISHED

    @property
    def stop_reason(self) -> StopReason:
        """A stream cut before its finish (we closed it to abort) counts as an abort."""
        if self.finish_reason is None:
            return StopReason.ABORT
        return _FINISH[self.finish_reason]

    def token_versions(self, fallback: int | None) -> list[int]:
        """Per-token versions from the spans; without spans (cut stream) every token gets `fallback`."""
        if self.weight_versions is not None:
            return parse_versions(self.weight_versions, len(self.token_ids))
        if fallback is None:
            raise ValueError("vLLM stream: no weight_versions and no version known for these tokens")
        return [fallback] * len(self.token_ids)
