"""An in-process FAKE SGLang HTTP server (a test double, not SGLang) speaking SGLang's native wire format.

SGLang does not run on this CPU machine, so `SGLangEngine` is tested against this server. Its request and
response schemas follow sglang's source (http_server.py, io_struct.py `GenerateReqInput`, `AbortReq`,
`PauseGenerationReqInput`, `UpdateWeightFromDiskReqInput`, tokenizer_manager.py `meta_info`,
utils/weight_versions.py spans): unknown sampling parameters are rejected like SGLang's `SamplingParams(**d)`.
Its "model" is arithmetic, so tests can read provenance back from the data:
- token = f(seed, context) (greedy uses seed 0); log-prob = -(v + 1) - (token % 10) / 10 under version v;
- routing row of input position p computed under version v: every layer's experts are distinct (a router's top-k
  is), the first is p % E and the others the experts after it, skipping v % (E - 1) of them;
- pause modes in_place and retract both freeze running requests until /continue_generation; abort ends them.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

SAMPLING_KEYS = {  # sglang/srt/sampling/sampling_params.py SamplingParams.__init__ (subset that exists)
    "max_new_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_token_ids",
    "no_stop_trim",
    "skip_special_tokens",
    "sampling_seed",
    "ignore_eos",
    "min_new_tokens",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "spaces_between_special_tokens",
    "n",
}


@dataclass
class _Req:
    rid: str
    aborted: bool = False
    rows: dict[int, np.ndarray] = field(default_factory=dict)


class FakeSGLangState:
    def __init__(
        self, *, vocab_size: int, num_layers: int, top_k: int, num_experts: int, token_delay: float, full_rows: bool
    ) -> None:
        self.vocab_size, self.num_layers, self.top_k, self.num_experts = vocab_size, num_layers, top_k, num_experts
        self.token_delay = token_delay
        self.full_rows = full_rows  # return N rows instead of N-1 (what one SGLang release did)
        self.label = "default"
        self.paused = False
        self.cond = threading.Condition()
        self.running: dict[str, _Req] = {}
        self.requests: list[dict[str, Any]] = []  # every JSON body received, for assertions
        self.rng = random.Random(0)

    def version(self) -> int:
        return 0 if self.label == "default" else int(self.label)

    def row(self, pos: int, v: int) -> np.ndarray:
        e = self.num_experts
        first = pos % e
        skip = v % (e - 1) if e > 1 else 0
        row = np.empty((self.num_layers, self.top_k), dtype=np.int32)
        for layer in range(self.num_layers):
            row[layer] = [first, *((first + 1 + skip + s) % e for s in range(self.top_k - 1))]
        return row

    def token(self, seed: int, ctx: list[int]) -> int:
        return (seed * 7919 + len(ctx) * 104729 + ctx[-1] * 31 + 17) % self.vocab_size

    def generate(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        sp = dict(body.get("sampling_params") or {})
        unknown = set(sp) - SAMPLING_KEYS
        if unknown:
            return 400, {"error": {"message": f"unexpected sampling params {sorted(unknown)}"}}
        ids, rid = body.get("input_ids"), body.get("rid")
        if not isinstance(ids, list) or not ids or not isinstance(rid, str):
            return 400, {"error": {"message": "input_ids (non-empty list) and rid (str) are required"}}
        start = int(body.get("routed_experts_start_len", 0))
        if not 0 <= start <= len(ids):
            return 400, {"error": {"message": f"routed_experts_start_len must be in [0, {len(ids)}]"}}
        with self.cond:
            if rid in self.running:
                return 400, {"error": {"message": f"duplicate rid {rid}"}}
            req = self.running[rid] = _Req(rid)
        try:
            return 200, self._decode(req, body, sp, list(ids), start)
        finally:
            with self.cond:
                del self.running[rid]

    def _decode(
        self, req: _Req, body: dict[str, Any], sp: dict[str, Any], ctx: list[int], start: int
    ) -> dict[str, Any]:
        c, toks, lps, labels = len(ctx), [], [], []
        greedy = float(sp.get("temperature", 1.0)) == 0.0
        seed = 0 if greedy else int(sp.get("sampling_seed", self.rng.randrange(1 << 30)))
        stops, finish = set(sp.get("stop_token_ids") or []), {"type": "length", "length": 0}
        while len(toks) < int(sp.get("max_new_tokens", 128)):
            time.sleep(self.token_delay)
            with self.cond:
                while self.paused and not req.aborted:
                    self.cond.wait()
                if req.aborted:
                    finish = {"type": "abort", "message": "Abort before finishing.", "status_code": None}
                    break
                v, label = self.version(), self.label
                for p in range(c - 1 + len(toks) if toks else 0, c + len(toks)):
                    req.rows[p] = self.row(p, v)
            tok = self.token(seed, ctx + toks)
            toks.append(tok)
            lps.append(-(v + 1) - (tok % 10) / 10)
            labels.append(label)
            if tok in stops:
                finish = {"type": "stop", "matched": tok}
                break
        if finish["type"] == "length":
            finish["length"] = len(toks)
        return self._answer(req, body, toks, lps, labels, finish, c, start)

    def _answer(
        self,
        req: _Req,
        body: dict[str, Any],
        toks: list[int],
        lps: list[float],
        labels: list[str],
        finish: dict[str, Any],
        c: int,
        start: int,
    ) -> dict[str, Any]:
        spans: list[dict[str, Any]] = []
        for i, label in enumerate(labels):
            if spans and spans[-1]["version"] == label:
                spans[-1]["end"] = i + 1
            else:
                spans.append({"version": label, "start": i, "end": i + 1})
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": c,
            "weight_version": self.label,
            "weight_versions": spans or [{"version": self.label, "start": 0, "end": 0}],
            "completion_tokens": len(toks),
            "cached_tokens": 0,
            "e2e_latency": 0.0,
        }
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(lps, toks, strict=True)]
        if body.get("return_routed_experts") and toks:
            end = c + len(toks) - 1 + (1 if self.full_rows else 0)
            if self.full_rows:
                req.rows[end - 1] = self.row(end - 1, self.version())
            rows = np.stack([req.rows[p] for p in range(start, end)]) if end > start else np.zeros((0, 1, 1))
            meta["routed_experts"] = base64.b64encode(rows.astype("<i4").tobytes()).decode()
        return {"text": "", "output_ids": toks, "meta_info": meta}

    def abort(self, body: dict[str, Any]) -> None:
        with self.cond:
            targets = self.running.values() if body.get("abort_all") else [self.running.get(body.get("rid", ""))]
            for req in targets:
                if req is not None:
                    req.aborted = True
            self.cond.notify_all()

    def pause(self, mode: str) -> tuple[int, dict[str, Any]]:
        if mode not in ("abort", "retract", "in_place"):
            return 422, {"detail": f"mode must be abort, retract or in_place, got {mode!r}"}
        with self.cond:
            self.paused = True
            if mode == "abort":
                for req in self.running.values():
                    req.aborted = True
            self.cond.notify_all()
        return 200, {"message": "Generation paused successfully.", "status": "ok"}

    def resume(self) -> dict[str, Any]:
        with self.cond:
            self.paused = False
            self.cond.notify_all()
        return {"message": "Generation continued successfully.", "status": "ok"}

    def update(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = body.get("model_path")
        if not isinstance(path, str) or not Path(path).is_dir():
            return 400, {"success": False, "message": f"model_path {path!r} is not a folder", "num_paused_requests": 0}
        with self.cond:
            if body.get("weight_version") is not None:
                self.label = str(body["weight_version"])
        return 200, {"success": True, "message": "Succeeded to update model weights.", "num_paused_requests": 0}


def _handler(state: FakeSGLangState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _send(self, code: int, payload: Any) -> None:
            data = b"" if payload is None else json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, None)
            elif self.path == "/model_info":
                self._send(200, {"model_path": "fake", "weight_version": state.label, "is_generation": True})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            state.requests.append({"path": self.path, **body})
            if self.path == "/generate":
                self._send(*state.generate(body))
            elif self.path == "/abort_request":
                state.abort(body)
                self._send(200, None)
            elif self.path == "/pause_generation":
                self._send(*state.pause(body.get("mode", "abort")))
            elif self.path == "/continue_generation":
                self._send(200, state.resume())
            elif self.path == "/update_weights_from_disk":
                self._send(*state.update(body))
            else:
                self._send(404, {"detail": "Not Found"})

    return Handler


class FakeSGLangServer:
    """Runs the fake on 127.0.0.1 in a daemon thread; `url` to connect, `state` to inspect, `stop()` to end."""

    def __init__(
        self,
        *,
        vocab_size: int = 512,
        num_layers: int = 2,
        top_k: int = 2,
        num_experts: int = 8,
        token_delay: float = 0.002,
        full_rows: bool = False,
    ) -> None:
        self.state = FakeSGLangState(
            vocab_size=vocab_size,
            num_layers=num_layers,
            top_k=top_k,
            num_experts=num_experts,
            token_delay=token_delay,
            full_rows=full_rows,
        )
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"

    def stop(self) -> None:
        self.state.resume()
        self.state.abort({"abort_all": True})
        self._http.shutdown()
        self._http.server_close()
