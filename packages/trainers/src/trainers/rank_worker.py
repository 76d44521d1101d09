"""The main function of one rank process: join the process group, build the backend and the algorithm, then
answer the driver's calls (`RankCall`) until it says `CLOSE` or its end of the pipe closes (the driver died).
Each call is the same on every rank; the collectives inside (FSDP2's all-gathers, the step's all-reduces) pair up.
"""

from __future__ import annotations

import logging
import os
import pickle
import traceback
from dataclasses import dataclass
from enum import Enum
from importlib.util import find_spec
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from trainers.algorithm.build import build_algorithm
from trainers.backend.config import RankedBackendConfig
from trainers.step_spec import StepSpec

if TYPE_CHECKING:
    from trainers.algorithm import Algorithm
    from trainers.backend.protocol import TrainingBackend


class RankCall(Enum):
    TRAIN = "train"  # payload: TrainBatch -> StepResult
    EXPORT = "export"  # -> (weights, version) on rank 0, None elsewhere
    STATE = "state"  # -> BackendState on rank 0, this rank's torch RNG state elsewhere
    LOAD = "load"  # payload: BackendState (this rank's RNG in rng.torch) -> version
    CLOSE = "close"


@dataclass(frozen=True)
class RankArgs:
    rank: int
    world_size: int
    port: int  # the rendezvous port on 127.0.0.1 (rank 0 listens)
    cfg: RankedBackendConfig
    spec: StepSpec


class RankFailure(RuntimeError):
    """An exception on a rank that could not be sent as itself; the message carries its traceback."""


def send(conn: Connection, obj: object) -> None:
    """Pickles `obj` by value. `Connection.send` would use multiprocessing's pickler, for which torch registers
    shared-memory reductions: every receiver of a tensor would then share its storage, and two ranks loading one
    checkpoint would step the same AdamW moments and counts."""
    conn.send_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> object:
    return pickle.loads(conn.recv_bytes())


def portable(exc: BaseException) -> BaseException:
    """`exc` itself when it survives pickling (so the driver raises the same type), else a `RankFailure`."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RankFailure("".join(traceback.format_exception(exc)))


def rank_main(args: RankArgs, conn: Connection) -> None:
    os.environ.setdefault("VEOMNI_VERBOSITY", "WARNING")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.cfg.torch_threads)
    try:
        backend, algorithm = _build(args)
    except BaseException as exc:
        send(conn, ("error", portable(exc)))
        raise
    send(conn, ("ok", backend.version))
    try:
        _serve(args, conn, backend, algorithm)
    finally:
        dist.destroy_process_group()


def _build(args: RankArgs) -> tuple[TrainingBackend, Algorithm]:
    import torch
    import torch.distributed as dist

    from trainers.backend.data_parallel import DataParallel

    _quiet_transformers()
    cuda = args.cfg.device == "cuda"
    if cuda:
        torch.cuda.set_device(args.rank)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world_size,
    )
    device = torch.device("cuda", args.rank) if cuda else torch.device("cpu")
    dp = DataParallel(args.rank, args.world_size, device) if args.world_size > 1 else None
    spec = args.spec
    torch.manual_seed(spec.seed)
    algorithm = build_algorithm(spec.algorithm, max_new_tokens=spec.max_new_tokens)
    backend = args.cfg.build_rank(
        spec.checkpoint_dir,
        spec.optim,
        temperature=spec.temperature,
        total_steps=spec.total_steps,
        seed=spec.seed,
        data_parallel=dp,
        device=device,
        reference=algorithm.needs_reference,
        vocab_size=spec.vocab_size,
    )
    return backend, algorithm


def _quiet_transformers() -> None:
    """No progress bars or info logs from transformers (VeOmni builds its model with it) in the ranks' output."""
    if find_spec("transformers") is None:  # an environment without transformers (trainers alone)
        return
    import transformers

    transformers.utils.logging.disable_progress_bar()
    logging.getLogger("transformers").setLevel(logging.ERROR)


def _serve(args: RankArgs, conn: Connection, backend: TrainingBackend, algorithm: Algorithm) -> None:
    from trainers.step import train_step

    while True:
        try:
            call, payload = receive(conn)  # type: ignore[misc]
        except EOFError:  # the driver is gone
            return
        if call is RankCall.CLOSE:
            import torch.distributed as dist

            dist.barrier()  # every rank is done before the group is torn down (gloo aborts a one-sided teardown)
            send(conn, ("ok", None))
            return
        try:
            if call is RankCall.TRAIN:
                value: object = train_step(backend, algorithm, payload, args.spec.loop, seed=args.spec.seed)
            elif call is RankCall.EXPORT:
                weights = backend.export_weights()
                value = weights if args.rank == 0 else None
            elif call is RankCall.STATE:
                state = backend.state_dict()
                value = state if args.rank == 0 else state.tensors["rng.torch"]
            elif call is RankCall.LOAD:
                backend.load_state_dict(payload)
                value = backend.version
            else:
                raise ValueError(f"rank {args.rank}: got an unknown call {call!r}")
        except Exception as exc:
            send(conn, ("error", portable(exc)))
            continue
        send(conn, ("ok", value))
