"""Algorithms for RL post-training: advantages, losses, KL, off-policy correction, validation metrics,
batch collation and inert padding. Pure functions over right-padded `[B, T]` tensors with a loss mask."""

from trainers.advantages import (
    broadcast_to_tokens,
    gae,
    grpo_advantages,
    masked_mean,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    reinforce_pp_returns,
    rloo_advantages,
)
from trainers.aggregation import AggMode, aggregate, count_nonempty_seqs, count_tokens
from trainers.batch import TrainBatch, collate
from trainers.kl import KL_KINDS, kl_estimate, kl_loss, kl_penalty_rewards
from trainers.padding import (
    PADDING_DATA_SOURCE,
    PaddingNotInertError,
    assert_inert,
    make_padding_sample,
    pad_to_multiple,
    quality_mask,
    required_multiple,
)
from trainers.policy_loss import decoupled_ppo_loss, gspo_loss, ppo_clip_loss
from trainers.rollout_correction import ISLevel, RatioBounds, RolloutCorrectionConfig, rollout_correction
from trainers.sample import TrainSample
from trainers.val_estimators import (
    bootstrap_best_worst,
    bootstrap_majority,
    expected_best_of_k,
    expected_majority_of_k,
    expected_worst_of_k,
    majority_value,
    pass_at_k,
)
from trainers.validation_metrics import ValSample, select_final, val_ks, validation_metrics

__all__ = [
    "KL_KINDS",
    "PADDING_DATA_SOURCE",
    "AggMode",
    "ISLevel",
    "PaddingNotInertError",
    "RatioBounds",
    "RolloutCorrectionConfig",
    "TrainBatch",
    "TrainSample",
    "ValSample",
    "aggregate",
    "assert_inert",
    "bootstrap_best_worst",
    "bootstrap_majority",
    "broadcast_to_tokens",
    "collate",
    "count_nonempty_seqs",
    "count_tokens",
    "decoupled_ppo_loss",
    "expected_best_of_k",
    "expected_majority_of_k",
    "expected_worst_of_k",
    "gae",
    "grpo_advantages",
    "gspo_loss",
    "kl_estimate",
    "kl_loss",
    "kl_penalty_rewards",
    "majority_value",
    "make_padding_sample",
    "masked_mean",
    "masked_whiten",
    "pad_to_multiple",
    "pass_at_k",
    "ppo_clip_loss",
    "quality_mask",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "reinforce_pp_returns",
    "required_multiple",
    "rloo_advantages",
    "rollout_correction",
    "select_final",
    "val_ks",
    "validation_metrics",
]
