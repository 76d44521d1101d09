"""BehaviourProbe: rollout-vs-training log-prob mismatch for stale samples, under the weights that sampled them.

In async training most tokens were sampled by an older version than the trainer holds, so comparing them with
the trainer's current forward measures the policy's own change, not engine/trainer mismatch. The probe keeps
the last `keep` versions' weights (one CPU copy each) and scores a seeded sample of sequences with a scratch
model loaded with the version `u` that sampled them, comparing only tokens of version `u`; with replay of the
engine's routing and without. Metrics: `mismatch/behaviour_replay/*` and `mismatch/behaviour_no_replay/*`. With
`sample_seqs` 0 it is off: no copy and no scratch model is kept.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

import numpy as np
import torch
from moe_models import MoEForCausalLM, RouterReplay
from trainers import TrainBatch
from trainers.backend.micro_batches import select_rows
from trainers.backend.mismatch import log_prob_mismatch


class BehaviourProbe:
    def __init__(self, model: MoEForCausalLM, *, keep: int, sample_seqs: int, temperature: float, seed: int) -> None:
        if keep < 1:
            raise ValueError(f"BehaviourProbe: expected keep >= 1, got {keep}")
        self.scratch = copy.deepcopy(model).eval() if sample_seqs else None
        self.keep, self.sample_seqs, self.temperature, self.seed = keep, sample_seqs, temperature, seed
        self.versions: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()

    def record(self, model: MoEForCausalLM, version: int) -> None:
        """Remembers `model`'s current weights as `version` (the oldest beyond `keep` is forgotten; nothing when
        the probe is off)."""
        if self.scratch is None:
            return
        self.versions[version] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        while len(self.versions) > self.keep:
            self.versions.popitem(last=False)

    @torch.no_grad()
    def measure(self, batch: TrainBatch, trainer_version: int) -> dict[str, float]:
        """Mismatch on up to `sample_seqs` real sequences sampled by a single remembered older version."""
        real = [i for i in range(batch.batch_size) if not bool(batch.is_padding[i])]
        by_version: dict[int, list[int]] = {}
        for i in real:
            sampled = batch.token_versions[i][batch.response_mask[i].bool()]
            if len(sampled) and int(sampled.min()) == int(sampled.max()) and int(sampled[0]) != trainer_version:
                by_version.setdefault(int(sampled[0]), []).append(i)
        candidates = [(v, i) for v, rows in by_version.items() if v in self.versions for i in rows]
        if not candidates or self.sample_seqs == 0 or batch.replay_ids is None:
            return {}
        rng = np.random.default_rng([self.seed, trainer_version, 0xBE])
        chosen = rng.choice(len(candidates), size=min(self.sample_seqs, len(candidates)), replace=False)
        out: dict[str, torch.Tensor] = {}
        rows_of: dict[int, list[int]] = {}
        for k in sorted(chosen.tolist()):
            rows_of.setdefault(candidates[k][0], []).append(candidates[k][1])
        parts = [self._score(select_rows(batch, rows), v) for v, rows in sorted(rows_of.items())]
        for replay in (True, False):
            name = "mismatch/behaviour_replay" if replay else "mismatch/behaviour_no_replay"
            train = torch.cat([p[replay][0].flatten() for p in parts])
            rollout = torch.cat([p[replay][1].flatten() for p in parts])
            mask = torch.cat([p[replay][2].flatten() for p in parts])
            out |= log_prob_mismatch(train, rollout, mask, name)
        floats = {k: float(v) for k, v in out.items()}
        return {k: v for k, v in floats.items() if not math.isnan(v)}  # a prefix with no token keeps its count

    def _score(self, sub: TrainBatch, version: int) -> dict[bool, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        assert self.scratch is not None  # measure() finds no remembered version when the probe is off
        self.scratch.load_state_dict(self.versions[version])
        mask = sub.response_mask * (sub.token_versions == version).to(sub.response_mask.dtype)
        out = {}
        for replay in (True, False):
            routing = RouterReplay(sub.replay_ids, sub.replay_mask) if replay else None
            lp, _ = self.scratch.token_log_probs(
                sub.input_ids, sub.attention_mask, temperature=self.temperature, replay=routing
            )
            out[replay] = (lp, sub.rollout_log_probs, mask)
        return out
