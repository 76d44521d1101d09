"""TorchBackend: plain-torch PPO updates of a MoE causal LM with router replay (R3), in one process or data
parallel over torch.distributed with FSDP2 (`trainers.backend.data_parallel`).

Loss denominators: every micro-batch of a mini-batch is aggregated with the mini-batch's token and sequence
counts (all-reduced over ranks), so summing the micro-batch losses gives exactly the mini-batch loss whatever
the token budget and the number of ranks.
"""

from __future__ import annotations

import numpy as np
import torch
from moe_models import MoEForCausalLM, RouterReplay, state_dict_numpy

from trainers.advantages import broadcast_to_tokens
from trainers.aggregation import AggMode, count_nonempty_seqs, count_tokens
from trainers.backend.config import TorchBackendConfig
from trainers.backend.data_parallel import DataParallel, full_state_numpy, shard_model
from trainers.backend.metric_sums import MetricSums
from trainers.backend.micro_batches import select_rows, split_by_token_budget, split_even
from trainers.backend.mismatch import log_prob_mismatch
from trainers.backend.state import BackendState
from trainers.batch import TrainBatch
from trainers.policy_loss import decoupled_ppo_loss, ppo_clip_loss

RNG_KEY = "rng.torch"


class TorchBackend:
    """Holds the policy model and its AdamW optimiser; implements `trainers.backend.TrainingBackend`."""

    def __init__(self, model: MoEForCausalLM, config: TorchBackendConfig, *, router_replay: bool = True,
                 version: int = 0, data_parallel: DataParallel | None = None) -> None:  # fmt: skip
        if AggMode(config.agg_mode) is AggMode.SEQ_MEAN_TOKEN_SUM_NORM:
            raise ValueError(
                "TorchBackend: agg_mode seq-mean-token-sum-norm needs a constant loss_scale_factor that "
                "ppo_clip_loss does not take; expected token-mean, token-sum, seq-mean-token-sum or seq-mean-token-mean"
            )
        self.model = model.train()
        self.config = config
        self.router_replay = router_replay
        self._version = version
        self._param_names = [name for name, _ in model.named_parameters()]
        self.dp = data_parallel
        if data_parallel is not None:
            shard_model(model)  # before the optimiser: it must hold the sharded parameters
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=config.lr, betas=(config.beta1, config.beta2), weight_decay=config.weight_decay
        )

    @property
    def version(self) -> int:
        return self._version

    # ------------------------------------------------------------------ forward
    def _forward(self, batch: TrainBatch, replay: bool) -> torch.Tensor:  # [B, T-1]
        routing = None
        if replay:
            if batch.replay_ids is None or batch.replay_mask is None:
                raise ValueError("router replay: expected a batch with routing (replay_ids), got none (dense model?)")
            routing = RouterReplay(batch.replay_ids, batch.replay_mask)
        log_probs, _ = self.model.token_log_probs(
            batch.input_ids, batch.attention_mask, temperature=self.config.temperature, replay=routing
        )
        return log_probs

    @torch.no_grad()
    def log_probs(self, batch: TrainBatch, *, replay: bool) -> torch.Tensor:  # [B, T-1] float32
        out = torch.zeros_like(batch.rollout_log_probs)
        for rows in split_by_token_budget(batch.seq_lengths.tolist(), range(batch.batch_size),
                                          self.config.micro_batch_tokens):  # fmt: skip
            sub = select_rows(batch, rows)
            out[rows, : sub.input_ids.shape[1] - 1] = self._forward(sub, replay)
        return out

    # ------------------------------------------------------------------ update
    def _no_replay_sample(self, batch: TrainBatch) -> dict[str, float]:
        """Mismatch without (and with) replay on up to `mismatch_sample_seqs` real sequences that hold tokens of the
        version the trainer holds (a seeded choice per version; none: no extra forward)."""
        n = self.config.mismatch_sample_seqs
        fresh = self._same_version_mask(batch).sum(dim=1) > 0  # only these rows have tokens to compare
        real = [i for i in range(batch.batch_size) if not bool(batch.is_padding[i]) and bool(fresh[i])]
        if n == 0 or not real or batch.replay_ids is None:
            return {}
        rng = np.random.default_rng([self.config.seed, self._version])
        rows = sorted(rng.choice(real, size=min(n, len(real)), replace=False).tolist())
        sub = select_rows(batch, rows)
        same = self._same_version_mask(sub)
        out = log_prob_mismatch(self.log_probs(sub, replay=False), sub.rollout_log_probs, same, "mismatch/no_replay")
        # the same sequences with replay, for a like-for-like comparison (mismatch/replay covers the whole batch)
        lp = self.log_probs(sub, replay=True)
        return out | log_prob_mismatch(lp, sub.rollout_log_probs, same, "mismatch/sample_replay")

    def _same_version_mask(self, batch: TrainBatch) -> torch.Tensor:  # [B, T-1]
        """Loss tokens sampled by exactly the weights held now: the only ones whose rollout log-prob the
        trainer's forward should reproduce (older tokens differ by the policy's own change, not by mismatch)."""
        return batch.response_mask * (batch.token_versions == self._version).to(batch.response_mask.dtype)

    def _micro_step(
        self, batch: TrainBatch, rows: list[int], old: torch.Tensor, adv: torch.Tensor, counts: tuple[float, float]
    ) -> tuple[dict[str, float], torch.Tensor, int]:
        """Forward + backward of one micro-batch; returns (loss metrics, its log-probs, its loss tokens)."""
        cfg = self.config
        sub = select_rows(batch, rows)
        width = sub.input_ids.shape[1] - 1
        log_probs = self._forward(sub, self.router_replay)
        common = dict(clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip_c=cfg.dual_clip, agg_mode=cfg.agg_mode,
                      num_tokens=counts[0], num_seqs=counts[1])  # fmt: skip
        if cfg.policy_loss == "decoupled":
            loss, metrics = decoupled_ppo_loss(
                log_probs, old[rows, :width], batch.rollout_log_probs[rows, :width], adv[rows, :width],
                sub.response_mask, is_cap=cfg.is_cap or None, **common,
            )  # fmt: skip
        else:
            loss, metrics = ppo_clip_loss(log_probs, old[rows, :width], adv[rows, :width], sub.response_mask, **common)
        world = 1 if self.dp is None else self.dp.world_size
        (loss * world).backward()  # FSDP2 averages gradients over ranks; the loss already has global denominators
        return metrics, log_probs.detach(), int(sub.response_mask.sum())

    def _micro_batches(self, batch: TrainBatch, rows: list[int]) -> list[list[int] | None]:
        """This rank's micro-batches; under data parallelism every rank runs the same number of forwards (FSDP2
        all-gathers per layer), so a rank with fewer gets `None` entries: inert forwards with a zero loss."""
        groups: list[list[int] | None] = list(
            split_by_token_budget(batch.seq_lengths.tolist(), rows, self.config.micro_batch_tokens)
        )
        if self.dp is not None:
            groups += [None] * (self.dp.max(len(groups)) - len(groups))
        return groups

    def _inert_forward(self, batch: TrainBatch, row: int) -> None:
        """A forward + backward with zero loss: joins the other ranks' collectives, adds nothing to a gradient."""
        sub = select_rows(batch, [row])
        (self._forward(sub, self.router_replay).sum() * 0.0).backward()

    def _optimizer_step(self, batch: TrainBatch, rows: list[int], old: torch.Tensor, adv: torch.Tensor,
                        sums: MetricSums, first_lp: torch.Tensor | None) -> None:  # fmt: skip
        """One AdamW step on the mini-batch `rows` (this rank's share of it under data parallelism); fills
        `first_lp` (pre-update log-probs) when given."""
        local = rows if self.dp is None else self.dp.shard(rows)
        mask = batch.response_mask[local]
        counts = (count_tokens(mask), count_nonempty_seqs(mask))
        if self.dp is not None:
            counts = (self.dp.sum(counts[0]), self.dp.sum(counts[1]))
        if counts[0] == 0:
            sums.add_count("actor/skipped_empty_mini_batches")
            return
        self.optimizer.zero_grad(set_to_none=True)
        for micro in self._micro_batches(batch, local):
            if micro is None:
                self._inert_forward(batch, local[0])
                continue
            metrics, log_probs, tokens = self._micro_step(batch, micro, old, adv, counts)
            sums.add_weighted(metrics, tokens, sum_keys=("actor/pg_loss",), max_keys=("actor/ratio_max",))
            if first_lp is not None:
                first_lp[micro, : log_probs.shape[1]] = log_probs
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        sums.add_step(float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm))

    def train_step(
        self, batch: TrainBatch, advantages: torch.Tensor, old_log_probs: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One PPO update (see `TrainingBackend`). `mismatch/replay/*` compares the rollout log-probs with the
        trainer's pre-update replayed forward: `old_log_probs` when recomputed, else the first mini-batch's own
        training forward (the whole batch when `mini_batches_per_step == 1`). Every `mismatch/*` metric covers only
        tokens sampled by the version the trainer holds (`/tokens` counts them): in synchronous training all of
        them, in asynchronous training the fresh ones."""
        cfg = self.config
        mask = batch.response_mask
        adv = advantages if advantages.dim() == 2 else broadcast_to_tokens(advantages, mask)
        if tuple(adv.shape) != tuple(mask.shape):
            raise ValueError(f"advantages: expected [B] or {tuple(mask.shape)}, got {tuple(advantages.shape)}")
        if old_log_probs is not None and old_log_probs.shape != mask.shape:
            raise ValueError(f"old_log_probs: expected {tuple(mask.shape)}, got {tuple(old_log_probs.shape)}")
        if cfg.policy_loss == "decoupled" and old_log_probs is None:
            raise ValueError(
                "policy_loss decoupled: expected recomputed old_log_probs (the proximal policy), got None; "
                "recompute them with log_probs() before train_step"
            )
        old = batch.rollout_log_probs if old_log_probs is None else old_log_probs
        out = self._no_replay_sample(batch)
        sums = MetricSums()
        mini_batches = split_even(batch.batch_size, cfg.mini_batches_per_step)
        first_lp = torch.zeros_like(mask) if old_log_probs is None else None
        for epoch in range(cfg.ppo_epochs):
            for i, rows in enumerate(mini_batches):
                capture = first_lp if epoch == 0 and i == 0 else None
                self._optimizer_step(batch, rows, old, adv, sums, capture)
        replay_prefix = "mismatch/replay" if self.router_replay else "mismatch/train"
        same = self._same_version_mask(batch)
        if old_log_probs is not None:
            out |= log_prob_mismatch(old_log_probs, batch.rollout_log_probs, same, replay_prefix)
        else:
            rows = mini_batches[0] if self.dp is None else self.dp.shard(mini_batches[0])
            out |= log_prob_mismatch(first_lp[rows], batch.rollout_log_probs[rows], same[rows], replay_prefix)
        self._version += 1
        result = sums.result()
        if self.dp is not None and "actor/pg_loss" in result:
            result["actor/pg_loss"] = self.dp.sum(result["actor/pg_loss"])  # each rank holds its share of the sum
        out |= result
        out["actor/lr"] = float(self.optimizer.param_groups[0]["lr"])
        out["actor/loss_tokens"] = float(count_tokens(mask))
        return out

    # ------------------------------------------------------------------ weights and checkpoints
    def export_weights(self) -> tuple[dict[str, np.ndarray], int]:
        """Full weights on every rank (all-gathered under data parallelism)."""
        if self.dp is not None:
            return full_state_numpy(self.model), self._version
        return state_dict_numpy(self.model), self._version

    def _single_process(self, what: str) -> None:
        if self.dp is not None:
            raise ValueError(
                f"TorchBackend.{what}: implemented for one process only; a data-parallel checkpoint needs "
                "torch.distributed.checkpoint (sharded optimiser state), which this backend does not write yet"
            )

    def state_dict(self) -> BackendState:
        self._single_process("state_dict")
        tensors = {f"model.{k}": v.detach().clone() for k, v in self.model.state_dict().items()}
        opt = self.optimizer.state_dict()
        for index, entry in opt["state"].items():
            for key, value in entry.items():
                tensors[f"optim.{index}.{key}"] = torch.as_tensor(value).detach().clone()
        tensors[RNG_KEY] = torch.get_rng_state()
        groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in opt["param_groups"]]
        return BackendState(tensors, self._version, groups, list(self._param_names))

    def load_state_dict(self, state: BackendState) -> None:
        self._single_process("load_state_dict")
        if state.optimizer_param_names != self._param_names:
            raise ValueError(
                f"load_state_dict: expected optimiser parameters {self._param_names[:3]}..., got "
                f"{state.optimizer_param_names[:3]}... ({len(state.optimizer_param_names)} names)"
            )
        model_state = {k[len("model.") :]: v for k, v in state.tensors.items() if k.startswith("model.")}
        self.model.load_state_dict(model_state, strict=True)
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in state.tensors.items():
            if key.startswith("optim."):
                _, index, name = key.split(".", 2)
                per_param.setdefault(int(index), {})[name] = value
        groups = [{k: tuple(v) if k == "betas" else v for k, v in g.items()} for g in state.optimizer_groups]
        self.optimizer.load_state_dict({"state": per_param, "param_groups": groups})
        if RNG_KEY not in state.tensors:
            raise ValueError(f"load_state_dict: expected the tensor {RNG_KEY!r} in the state, got none")
        torch.set_rng_state(state.tensors[RNG_KEY])
        self._version = state.version
