"""RankGroup: a `StepRunner` whose backend lives in `ranks` processes of their own (spawned, one per rank), each
holding its part of the policy (a VeOmni FSDP2 shard, a Megatron-Core expert-parallel rank) and running the same
`train_step` on the same batch; the driver sends each call to every rank and keeps rank 0's answer. Batches and
weights cross the process boundary by pickling (a pipe per rank). What a rank builds is its config's
(`RankedBackendConfig.build_rank`).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import socket
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

import torch

from trainers.backend.config import RankedBackendConfig
from trainers.backend.optimised_module import RNG_KEY
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch
from trainers.rank_worker import RankArgs, RankCall, RankFailure, rank_main, receive, send
from trainers.step import StepResult
from trainers.step_spec import StepSpec

if TYPE_CHECKING:
    from moe_models import MoEForCausalLM

START_TIMEOUT_S = 600.0  # importing the training library and building the model, per rank


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_rng_key(rank: int) -> str:
    return f"{RNG_KEY}.rank{rank}"


class RankGroup:
    """Implements `trainers.step_runner.StepRunner`. Rank 0's torch RNG is the checkpoint's `rng.torch`, rank r's is
    `rng.torch.rank<r>`."""

    def __init__(
        self, spec: StepSpec, processes: list[mp.process.BaseProcess], conns: list[Connection], version: int, kind: str
    ) -> None:
        self.spec, self.processes, self.conns, self.kind = spec, processes, conns, kind
        self._version = version
        self._model: MoEForCausalLM | None = None
        self._model_version = -1
        self._exported: tuple[dict[str, torch.Tensor], int] | None = None

    @classmethod
    def start(cls, cfg: RankedBackendConfig, spec: StepSpec) -> RankGroup:
        """Spawns the ranks and waits until each has built its backend (or raises the first rank's error); a
        checkpoint the backend refuses is refused before any rank starts."""
        cfg.check_installed()
        refused = cfg.unsupported_checkpoint(spec.checkpoint_dir)
        if refused:
            raise ValueError(refused)
        ctx = mp.get_context("spawn")
        port = _free_port()
        processes, conns = [], []
        for rank in range(cfg.ranks):
            ours, theirs = ctx.Pipe()
            p = ctx.Process(
                target=rank_main,
                args=(RankArgs(rank, cfg.ranks, port, cfg, spec), theirs),
                name=f"{cfg.kind}-rank{rank}",
                daemon=True,
            )
            p.start()
            theirs.close()
            processes.append(p)
            conns.append(ours)
        group = cls(spec, processes, conns, version=0, kind=cfg.kind)
        try:
            versions = group._collect(timeout_s=START_TIMEOUT_S)
        except BaseException:
            group.close()
            raise
        group._version = int(versions[0])
        return group

    # ------------------------------------------------------------------ calls
    def _collect(self, timeout_s: float | None = None) -> list[object]:
        """Every rank's answer to the last call, in rank order; raises the first rank's error."""
        answers, error = [], None
        for rank, conn in enumerate(self.conns):
            if timeout_s is not None and not conn.poll(timeout_s):
                raise RankFailure(f"{self.kind} rank {rank}: no answer within {timeout_s:.0f} s")
            try:
                status, value = receive(conn)  # type: ignore[misc]
            except EOFError as exc:
                code = self.processes[rank].exitcode
                raise RankFailure(f"{self.kind} rank {rank}: the process ended (exit code {code})") from exc
            if status == "error" and error is None:
                error = value
            answers.append(value)
        if error is not None:
            raise error  # type: ignore[misc]
        return answers

    def _call(self, call: RankCall, payloads: list[object] | None = None) -> list[object]:
        for rank, conn in enumerate(self.conns):
            send(conn, (call, None if payloads is None else payloads[rank]))
        return self._collect()

    @property
    def version(self) -> int:
        return self._version

    @property
    def world_size(self) -> int:
        return len(self.conns)

    def train_step(self, batch: TrainBatch) -> StepResult:
        result = self._call(RankCall.TRAIN, [batch] * self.world_size)[0]
        assert isinstance(result, StepResult)
        self._version += 1
        return result

    def export_weights(self) -> tuple[dict[str, torch.Tensor], int]:
        """The ranks' full weights, gathered once per version (the behaviour probe's copy and a weight push of the
        same version share one gather; callers must not modify the tensors)."""
        if self._exported is None or self._exported[1] != self._version:
            weights, version = self._call(RankCall.EXPORT)[0]  # type: ignore[misc]
            self._exported = (weights, version)
        return self._exported

    def policy_model(self) -> MoEForCausalLM:
        """Our model with the ranks' current weights (a copy, refreshed when the version moved)."""
        from moe_models import load_pretrained

        if self._model is None:
            self._model = load_pretrained(self.spec.checkpoint_dir, vocab_size=self.spec.vocab_size)
        if self._model_version != self._version:
            weights, self._model_version = self.export_weights()
            missing, unexpected = self._model.load_state_dict(weights, strict=False)
            if unexpected or set(missing) - {"lm_head.weight"}:  # only a tied lm_head is not exported
                raise ValueError(
                    f"RankGroup.policy_model: the ranks' weights do not fit our model: missing "
                    f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}"
                )
        return self._model

    def state_dict(self) -> BackendState:
        answers = self._call(RankCall.STATE)
        state = answers[0]
        assert isinstance(state, BackendState)
        for rank, rng in enumerate(answers[1:], start=1):
            state.tensors[_rank_rng_key(rank)] = rng  # type: ignore[assignment]
        return state

    def load_state_dict(self, state: BackendState) -> None:
        """A state of any rank count loads (a rank without its own RNG entry takes rank 0's)."""
        shared = {k: v for k, v in state.tensors.items() if not k.startswith(f"{RNG_KEY}.rank")}
        payloads: list[object] = []
        for rank in range(self.world_size):
            tensors = dict(shared)
            tensors[RNG_KEY] = state.tensors.get(_rank_rng_key(rank), state.tensors[RNG_KEY])
            payloads.append(BackendState(tensors, state.version, state.optimizer_groups, state.optimizer_param_names))
        self._version = int(self._call(RankCall.LOAD, payloads)[0])  # type: ignore[arg-type]
        self._model_version, self._exported = -1, None

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(BrokenPipeError, OSError):  # a rank that died already
                send(conn, (RankCall.CLOSE, None))
        for p in self.processes:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        for conn in self.conns:
            conn.close()
