"""What the vLLM and SGLang clients share: one httpx pool per server, and one rule for failed answers."""

from __future__ import annotations

import httpx


def open_pool(base_url: str, *, timeout_s: float, max_connections: int) -> httpx.AsyncClient:
    """An async connection pool to one server; create it inside the event loop that uses it.

    Idle connections are dropped after 1 s, before uvicorn's 5 s keep-alive timeout closes them from the server
    side (reusing such a connection fails with "Server disconnected without sending a response").
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=64, keepalive_expiry=1.0)
    return httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout_s, limits=limits)


def raise_for(r: httpx.Response, what: str, *, server: str, server_error: type[Exception]) -> None:
    """A 4xx answer is the caller's mistake (ValueError with the server's message); any other non-2xx is
    `server_error`."""
    if r.is_success:
        return
    text = r.text[:2000]
    if 400 <= r.status_code < 500:
        raise ValueError(f"{server} rejected {what}: HTTP {r.status_code}: {text}")
    raise server_error(f"{server} failed {what}: HTTP {r.status_code}: {text}")


async def post_control(http: httpx.AsyncClient, path: str, **kwargs: object) -> httpx.Response:
    """POST to an idempotent control endpoint (pause, resume, abort, version, reload); one retry when the server
    dropped a pooled connection before answering, since the request then never reached it."""
    try:
        return await http.post(path, **kwargs)  # type: ignore[arg-type]
    except httpx.RemoteProtocolError:
        return await http.post(path, **kwargs)  # type: ignore[arg-type]
