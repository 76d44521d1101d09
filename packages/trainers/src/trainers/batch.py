"""TrainBatch: right-padded tensors of a list of TrainSamples, aligned with the log-prob shift.

Sequence b occupies positions `0 .. N_b-1` of `input_ids` (prompt then response), padded on the right to
`T = max N_b`. Shifted tensors have `T-1` columns: entry `t` scores token `t+1`, i.e. it is read from the
model's output row `t`, the distribution that token `t+1` was sampled from. Response token `j` of a sample with
prompt length `P` is therefore entry `P-1+j` of `response_mask`, `rollout_log_probs` and `token_versions`.

`teacher_log_probs` (distillation) is on the shifted grid too: a teacher's log-prob of each response token, and
with a teacher top-k, `teacher_top_*` its K most likely ids per row, their log-probs and validity.
`to(device)` moves what a forward and a loss read; `is_padding`, `prompt_lengths` and `seq_lengths` stay on the
host, where batches are planned (row choice, widths, micro-batch splits) without waiting for a device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from rollout_core import NOT_SAMPLED, TrajectoryStatus
from routing_state import RoutingSpec

from trainers.sample import TrainSample
from trainers.stale_tokens import StaleBound

__all__ = ["TrainBatch", "collate"]

INT16_MAX_EXPERTS = 32767


@dataclass
class TrainBatch:
    """Tensors for B samples; `T` is the longest sequence. Lists are in sample order."""

    input_ids: torch.Tensor  # [B, T] int64, pad_token_id after each sequence
    attention_mask: torch.Tensor  # [B, T] int64, 1 on real tokens
    response_mask: torch.Tensor  # [B, T-1] float32, the loss mask on the shifted grid
    rollout_log_probs: torch.Tensor  # [B, T-1] float32, 0 off the response
    token_versions: torch.Tensor  # [B, T-1] int64, NOT_SAMPLED off sampled tokens
    replay_ids: torch.Tensor | None  # [B, T, L, K] int16 (int32 beyond 32767 experts); None: no routing
    replay_mask: torch.Tensor | None  # [B, T] bool, True where a recorded row exists
    rewards: torch.Tensor  # [B] float32
    is_padding: torch.Tensor  # [B] bool
    prompt_lengths: torch.Tensor  # [B] int64
    seq_lengths: torch.Tensor  # [B] int64
    group_ids: list[str]
    uids: list[str]
    data_sources: list[str]
    teacher_log_probs: torch.Tensor | None = None  # [B, T-1] float32, 0 off the response; None: no teacher
    teacher_top_ids: torch.Tensor | None = None  # [B, T-1, K] int64, the teacher's top-k per row (None: K = 0)
    teacher_top_log_probs: torch.Tensor | None = None  # [B, T-1, K] float32
    teacher_top_valid: torch.Tensor | None = None  # [B, T-1, K] bool, False off the response and on pads
    stale_bound: StaleBound | None = None  # async training: tokens older than the bound get the behaviour correction

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def num_loss_tokens(self) -> int:
        return int(self.response_mask.sum().item())

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def to(self, device: torch.device | str) -> TrainBatch:
        """The batch with its model and loss tensors on `device` (itself when they are there already)."""
        device = torch.device(device)
        if self.input_ids.device == device:
            return self

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return dataclasses.replace(
            self,
            input_ids=move(self.input_ids),
            attention_mask=move(self.attention_mask),
            response_mask=move(self.response_mask),
            rollout_log_probs=move(self.rollout_log_probs),
            token_versions=move(self.token_versions),
            replay_ids=move(self.replay_ids),
            replay_mask=move(self.replay_mask),
            rewards=move(self.rewards),
            teacher_log_probs=move(self.teacher_log_probs),
            teacher_top_ids=move(self.teacher_top_ids),
            teacher_top_log_probs=move(self.teacher_top_log_probs),
            teacher_top_valid=move(self.teacher_top_valid),
        )


def _routing_spec(samples: Sequence[TrainSample]) -> RoutingSpec | None:
    """The one spec of the real samples' traces, or None when no real sample routes."""
    real = [s for s in samples if not s.is_padding]
    specs = {None if s.routing is None else s.routing.spec for s in real}
    if len(specs) > 1:
        raise ValueError(
            f"collate: expected every real sample to have routing with one spec, or none to have it; got {specs}"
        )
    spec = next(iter(specs), None)
    if spec is None and any(s.routing is not None for s in samples):
        raise ValueError("collate: a padding sample has routing but no real sample does")
    return spec


def _replay(samples: Sequence[TrainSample], spec: RoutingSpec, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = np.int16 if spec.num_experts <= INT16_MAX_EXPERTS else np.int32
    ids = np.zeros((len(samples), width, *spec.row_shape), dtype=dtype)
    mask = np.zeros((len(samples), width), dtype=bool)
    for b, s in enumerate(samples):
        if s.routing is None:
            continue  # padding: no recorded rows, routes natively
        if s.routing.spec != spec:
            raise ValueError(f"collate: sample {s.uid} routing spec {s.routing.spec}, expected {spec}")
        rows, row_mask = s.routing.replay(width)
        ids[b], mask[b] = rows, row_mask
    return torch.from_numpy(ids), torch.from_numpy(mask)


@dataclass(frozen=True)
class _TeacherTensors:
    log_probs: torch.Tensor  # [B, T-1]
    top_ids: torch.Tensor | None  # [B, T-1, K]
    top_log_probs: torch.Tensor | None  # [B, T-1, K]
    top_valid: torch.Tensor | None  # [B, T-1, K] bool


def _teacher(samples: Sequence[TrainSample], width: int) -> _TeacherTensors | None:
    """The teacher's scores on the shifted grid when every real sample has them, None when none has; pads (and
    every entry off a response) get log-prob 0 and invalid top-k entries. All real samples share one top-k."""
    real = [s for s in samples if not s.is_padding]
    having = [s for s in real if s.teacher is not None]
    if not having:
        return None
    if len(having) != len(real):
        missing = [s.uid for s in real if s.teacher is None]
        raise ValueError(
            f"collate: expected teacher scores on every real sample or none, got {len(missing)} without "
            f"({missing[:5]}): a sample is never trained without its teacher's scores"
        )
    ks = {s.teacher.top_k for s in having if s.teacher is not None}
    if len(ks) != 1:
        raise ValueError(f"collate: expected one teacher top-k for every sample, got {sorted(ks)}")
    k, b = ks.pop(), len(samples)
    lp = torch.zeros((b, width - 1), dtype=torch.float32)
    ids = torch.zeros((b, width - 1, k), dtype=torch.int64) if k else None
    top = torch.zeros((b, width - 1, k), dtype=torch.float32) if k else None
    valid = torch.zeros((b, width - 1, k), dtype=torch.bool) if k else None
    for i, s in enumerate(samples):
        t = s.teacher
        if t is None or not s.response_ids:
            continue
        rows = slice(len(s.prompt_ids) - 1, len(s.prompt_ids) - 1 + len(s.response_ids))
        # torch.tensor copies: arrays read from Ray's object store are read-only, which torch.from_numpy warns about
        lp[i, rows] = torch.tensor(t.sampled)
        if ids is not None and top is not None and valid is not None:
            ids[i, rows], top[i, rows], valid[i, rows] = (
                torch.tensor(t.ids),
                torch.tensor(t.logprobs),
                torch.tensor(t.valid),
            )
    return _TeacherTensors(lp, ids, top, valid)


def collate(samples: Sequence[TrainSample], pad_token_id: int) -> TrainBatch:
    """Right-pads `samples` into a TrainBatch; raises ValueError on a sample whose status is not ok."""
    if not samples:
        raise ValueError("collate: expected at least one sample, got none")
    bad = [(s.uid, str(s.status)) for s in samples if s.status is not TrajectoryStatus.OK]
    if bad:
        raise ValueError(f"collate: expected only samples with status ok, got {bad[:5]} ({len(bad)} in all)")
    width = max(s.num_tokens for s in samples)
    B = len(samples)
    input_ids = torch.full((B, width), int(pad_token_id), dtype=torch.int64)
    attention = torch.zeros((B, width), dtype=torch.int64)
    resp_mask = torch.zeros((B, width - 1), dtype=torch.float32)
    log_probs = torch.zeros((B, width - 1), dtype=torch.float32)
    versions = torch.full((B, width - 1), NOT_SAMPLED, dtype=torch.int64)
    for b, s in enumerate(samples):
        n, p, r = s.num_tokens, len(s.prompt_ids), len(s.response_ids)
        input_ids[b, :n] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.int64)
        attention[b, :n] = 1
        if r:
            resp_mask[b, p - 1 : p - 1 + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
            log_probs[b, p - 1 : p - 1 + r] = torch.tensor(s.rollout_log_probs, dtype=torch.float32)
            versions[b, p - 1 : p - 1 + r] = torch.tensor(s.token_versions, dtype=torch.int64)
    spec = _routing_spec(samples)
    replay_ids, replay_mask = (None, None) if spec is None else _replay(samples, spec, width)
    teacher = _teacher(samples, width)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=resp_mask,
        rollout_log_probs=log_probs,
        token_versions=versions,
        replay_ids=replay_ids,
        replay_mask=replay_mask,
        rewards=torch.tensor([s.reward for s in samples], dtype=torch.float32),
        is_padding=torch.tensor([s.is_padding for s in samples], dtype=torch.bool),
        prompt_lengths=torch.tensor([len(s.prompt_ids) for s in samples], dtype=torch.int64),
        seq_lengths=torch.tensor([s.num_tokens for s in samples], dtype=torch.int64),
        group_ids=[s.group_id for s in samples],
        uids=[s.uid for s in samples],
        data_sources=[s.data_source for s in samples],
        teacher_log_probs=None if teacher is None else teacher.log_probs,
        teacher_top_ids=None if teacher is None else teacher.top_ids,
        teacher_top_log_probs=None if teacher is None else teacher.top_log_probs,
        teacher_top_valid=None if teacher is None else teacher.top_valid,
    )
