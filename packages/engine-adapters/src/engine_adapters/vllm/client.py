"""VLLMClient: typed async calls to the HTTP endpoints of a vLLM server started with VLLM_SERVER_DEV_MODE=1.

Endpoints (vllm 0.32 source): `/inference/v1/generate` (scale-out), `/pause?mode=`, `/resume`, `/is_paused`,
`/abort_requests` (body ids are the ids the API server gave the engine, e.g. `generate-tokens-<request_id>`),
`/update_weight_version`, `/weight_info`, `/collective_rpc` (string args; JSON results, one per worker),
`/reset_prefix_cache`, `/v1/models`. A 4xx answer is the caller's mistake and raises ValueError with the
server's message; anything else non-2xx raises `VLLMServerError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx

from engine_adapters.http_pool import open_pool, post_control, raise_for
from engine_adapters.vllm.server import VLLMServerError

PauseMode = Literal["abort", "wait", "keep"]


def _raise_for(r: httpx.Response, what: str) -> None:
    raise_for(r, what, server="vLLM", server_error=VLLMServerError)


class VLLMClient:
    """One httpx connection pool to one server; create it inside the event loop that uses it."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, max_connections: int = 512) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = open_pool(self.base_url, timeout_s=timeout_s, max_connections=max_connections)

    async def aclose(self) -> None:
        await self._http.aclose()

    @asynccontextmanager
    async def generate_lines(self, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[str]]:
        """Opens a streaming `/inference/v1/generate`; leaving the block closes the connection (vLLM aborts)."""
        async with self._http.stream("POST", "/inference/v1/generate", json=body) as r:
            if not r.is_success:
                await r.aread()
                _raise_for(r, "/inference/v1/generate")
            yield r.aiter_lines()

    async def generate_once(self, body: dict[str, Any]) -> dict[str, Any]:
        """A non-streaming `/inference/v1/generate` (e.g. a prefill asking for `prompt_logprobs`): the JSON answer."""
        r = await self._http.post("/inference/v1/generate", json=body)
        if not r.is_success:
            _raise_for(r, "/inference/v1/generate")
        return r.json()

    async def _post(self, path: str, *, json: Any = None, params: dict[str, str] | None = None) -> httpx.Response:
        r = await post_control(self._http, path, json=json, params=params)
        _raise_for(r, path)
        return r

    async def abort(self, engine_ids: list[str]) -> None:
        if not engine_ids:
            raise ValueError("abort: expected at least one id (an empty list would abort every request)")
        await self._post("/abort_requests", json={"request_ids": engine_ids})

    async def pause(self, mode: PauseMode) -> None:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"pause mode: expected 'abort', 'wait' or 'keep', got {mode!r}")
        await self._post("/pause", params={"mode": mode})

    async def resume(self) -> None:
        await self._post("/resume")

    async def is_paused(self) -> bool:
        r = await self._http.get("/is_paused")
        _raise_for(r, "/is_paused")
        return bool(r.json()["is_paused"])

    async def weight_version(self) -> str | None:
        r = await self._http.get("/weight_info")
        _raise_for(r, "/weight_info")
        v = r.json().get("weight_version")
        return None if v is None else str(v)

    async def update_weight_version(self, version: str) -> None:
        await self._post("/update_weight_version", json={"new_version": version})

    async def reset_prefix_cache(self) -> bool:
        r = await self._post("/reset_prefix_cache")
        return bool(r.json()["success"])

    async def collective_rpc(self, method: str, *args: str, timeout_s: float | None = None) -> list[Any]:
        """Calls `method` on every worker (our extension's methods); returns one JSON result per worker."""
        body: dict[str, Any] = {"method": method, "args": [str(a) for a in args]}
        if timeout_s is not None:
            body["timeout"] = timeout_s
        r = await self._post("/collective_rpc", json=body)
        if not r.content:
            return []
        return list(r.json()["results"])

    async def max_model_len(self) -> int:
        r = await self._http.get("/v1/models")
        _raise_for(r, "/v1/models")
        data = r.json()["data"]
        if not data:
            raise VLLMServerError("vLLM /v1/models lists no model")
        return int(data[0]["max_model_len"])
