"""SGLangResponse: the JSON answer of SGLang's native `/generate` (non-streaming, `input_ids` in).

Schema read from sglang's source (python/sglang/srt/managers/tokenizer_manager.py `_handle_batch_output`,
io_struct.py, utils/weight_versions.py): `{"text", "output_ids": [...], "meta_info": {...}}` where meta_info has
`id`, `finish_reason` (`{"type": "stop", "matched": ...}`, `{"type": "length", "length": n}` or
`{"type": "abort", "message": ...}`), `prompt_tokens`, `completion_tokens`, `weight_version` (label of the
weights now loaded), newer releases `weight_versions` (`[{version, start, end}]` spans over output tokens),
with `return_logprob` `output_token_logprobs` (`[[logprob, token_id, text|None], ...]`), and with
`return_routed_experts` `routed_experts`: base64 of the int32 buffer `[rows, layers, top_k]` for input
positions `[routed_experts_start_len, seqlen - 1)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout_core import StopReason

_FINISH = {"stop": StopReason.STOP, "length": StopReason.LENGTH, "abort": StopReason.ABORT}


class SGLangGenerateError(RuntimeError):
    """SGLang answered a generation with an error finish (not an abort we asked for)."""


def _version(label: Any, labels: dict[str, int]) -> int:
    """Our versions are decimal labels; `labels` maps the server's pre-existing label (e.g. "default") to 0."""
    text = str(label)
    if text in labels:
        return labels[text]
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(f"SGLang weight_version: expected a decimal label, got {label!r}") from exc


@dataclass
class SGLangResponse:
    """One finished (or aborted) `/generate` call."""

    token_ids: list[int]
    log_probs: list[float]
    stop_reason: StopReason
    token_versions: list[int]
    routed_experts_b64: str | None
    prompt_tokens: int

    @classmethod
    def parse(cls, body: dict[str, Any], labels: dict[str, int]) -> SGLangResponse:
        if isinstance(body, list):
            raise ValueError(f"SGLang /generate: expected one result (single prompt), got a list of {len(body)}")
        meta = body["meta_info"]
        reason = meta.get("finish_reason")
        if not isinstance(reason, dict) or reason.get("type") not in _FINISH:
            raise SGLangGenerateError(f"SGLang /generate: unexpected finish_reason {reason!r}")
        if reason["type"] == "abort" and reason.get("status_code") not in (None, 200):
            raise SGLangGenerateError(f"SGLang aborted the request with an error: {reason}")
        ids = [int(t) for t in body.get("output_ids") or []]
        entries = meta.get("output_token_logprobs") or []
        if len(entries) != len(ids):
            raise ValueError(f"SGLang /generate: {len(ids)} output ids but {len(entries)} log-probs")
        for tok, entry in zip(ids, entries, strict=True):
            if int(entry[1]) != tok:
                raise ValueError(f"SGLang /generate: log-prob entry for token {entry[1]}, expected {tok}")
        return cls(
            token_ids=ids,
            log_probs=[float(e[0]) for e in entries],
            stop_reason=_FINISH[reason["type"]],
            token_versions=_token_versions(meta, len(ids), labels),
            routed_experts_b64=meta.get("routed_experts"),
            prompt_tokens=int(meta.get("prompt_tokens", -1)),
        )


def _token_versions(meta: dict[str, Any], n: int, labels: dict[str, int]) -> list[int]:
    spans = meta.get("weight_versions")
    if spans is None:  # older releases: one label for the whole output
        return [_version(meta["weight_version"], labels)] * n
    out: list[int] = []
    for span in spans:
        start, end = int(span["start"]), int(span["end"])
        if start != len(out) or end < start:
            raise ValueError(f"SGLang weight_versions: expected contiguous spans from 0, got {spans}")
        out.extend([_version(span["version"], labels)] * (end - start))
    if len(out) != n:
        if n == 0 and len(out) == 0:
            return out
        raise ValueError(f"SGLang weight_versions: spans cover {len(out)} tokens, the output has {n}")
    return out
