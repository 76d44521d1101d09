"""SGLangClient: typed async calls to SGLang's native HTTP API (sglang/srt/entrypoints/http_server.py).

`/generate` (GenerateReqInput), `/abort_request` (AbortReq: `rid`, `abort_all`), `/pause_generation`
(`mode`: abort | retract | in_place), `/continue_generation`, `/update_weights_from_disk`
(UpdateWeightFromDiskReqInput: `model_path`, `weight_version`, `flush_cache`, `abort_all_requests`; answers
`{success, message, num_paused_requests}`, 400 on failure), `/model_info` (`weight_version`), `/health`.
A 4xx answer raises ValueError with the server's message; other failures raise `SGLangServerError`.
"""

from __future__ import annotations

from typing import Any, Literal

import httpx

from engine_adapters.http_pool import open_pool, post_control, raise_for

SGLangPauseMode = Literal["abort", "retract", "in_place"]


class SGLangServerError(RuntimeError):
    """The SGLang server failed a call (5xx, or `success: false` on a weight update)."""


def _raise_for(r: httpx.Response, what: str) -> None:
    raise_for(r, what, server="SGLang", server_error=SGLangServerError)


class SGLangClient:
    """One httpx connection pool to one server; create it inside the event loop that uses it."""

    def __init__(self, base_url: str, *, timeout_s: float = 600.0, max_connections: int = 512) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = open_pool(self.base_url, timeout_s=timeout_s, max_connections=max_connections)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        r = await self._http.post("/generate", json=body)
        _raise_for(r, "/generate")
        return r.json()

    async def abort(self, rid: str) -> None:
        r = await post_control(self._http, "/abort_request", json={"rid": rid, "abort_all": False})
        _raise_for(r, "/abort_request")

    async def pause(self, mode: SGLangPauseMode) -> None:
        if mode not in ("abort", "retract", "in_place"):
            raise ValueError(f"SGLang pause mode: expected 'abort', 'retract' or 'in_place', got {mode!r}")
        r = await post_control(self._http, "/pause_generation", json={"mode": mode})
        _raise_for(r, "/pause_generation")

    async def resume(self) -> None:
        r = await post_control(self._http, "/continue_generation", json={})
        _raise_for(r, "/continue_generation")

    async def update_weights_from_disk(self, model_path: str, weight_version: str, *, flush_cache: bool) -> None:
        body = {"model_path": model_path, "weight_version": weight_version, "flush_cache": flush_cache}
        r = await post_control(self._http, "/update_weights_from_disk", json=body)
        if r.status_code == 400:
            raise SGLangServerError(f"SGLang could not load weights from {model_path!r}: {r.text[:2000]}")
        _raise_for(r, "/update_weights_from_disk")
        answer = r.json()
        if not answer.get("success", False):
            raise SGLangServerError(f"SGLang could not load weights from {model_path!r}: {answer}")

    async def weight_version(self) -> str:
        r = await self._http.get("/model_info")
        _raise_for(r, "/model_info")
        return str(r.json()["weight_version"])
