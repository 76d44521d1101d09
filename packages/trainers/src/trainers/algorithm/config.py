"""The `algorithm` section: which policy loss (a tagged union chosen by `kind`), which advantage estimator, an
optional KL-to-reference term and an optional rollout correction (`trainers.algorithm.correction`). Standard
library only (`--help` imports it).

Every variant is built into its `Algorithm` by `trainers.algorithm.build.build_algorithm` (torch is imported there,
not here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from run_lifecycle.fields import help_field

from trainers.algorithm.correction import CorrectionConfig

Estimator = Literal["grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"]
AggModeName = Literal["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimatorName = Literal[
    "k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "kl+", "abs+", "k2+", "mse+", "k3+", "low_var_kl+"
]
OUTCOME_ESTIMATORS = ("grpo", "drgrpo", "rloo")  # one scalar per sequence, from the sequence's (total) reward


@dataclass
class KLConfig:
    """KL between the policy and the frozen base model (the reference): added to the loss (`loss`, GRPO's
    choice) or subtracted from the token rewards before the advantages (`reward`, PPO's choice)."""

    coef: float = help_field("weight of the KL term (0: off; no reference model is kept)", 0.0)
    estimator: KLEstimatorName = field(
        default="low_var_kl",
        metadata={
            "help": "per-token estimator: k1 (log-ratio), abs, k2 (half squared log-ratio), k3 (low-variance, "
            "unbiased); a '+' suffix keeps the named value with k2's gradient (straight-through)"
        },
    )
    mode: Literal["loss", "reward"] = help_field(
        "loss: coef x KL in the loss; reward: a per-token reward penalty", "loss"
    )

    def __post_init__(self) -> None:
        if self.coef < 0:
            raise ValueError(f"algorithm.kl.coef: expected >= 0, got {self.coef}")


@dataclass
class PolicyGradientConfig:
    """What every policy-gradient variant shares: the estimator, the loss aggregation, KL and correction."""

    kind: str = ""
    clip_low: float = help_field("ratio clip below 1", 0.2)
    clip_high: float = help_field("ratio clip above 1 (DAPO's clip-higher when larger than clip_low)", 0.2)
    advantage: Estimator = field(
        default="grpo",
        metadata={
            "help": "advantage estimator: grpo, drgrpo (GRPO without the std), rloo, reinforce_pp (whitened "
            "discounted returns), reinforce_pp_baseline (group baseline, whitened), gae (no critic: V = 0)"
        },
    )
    gamma: float = help_field("discount of reinforce_pp and gae", 1.0)
    lam: float = help_field("GAE lambda", 1.0)
    agg_mode: AggModeName = field(default="token-mean", metadata={"help": "loss aggregation over tokens and sequences"})
    loss_scale_factor: float = help_field(
        "seq-mean-token-sum-norm's constant divisor (Dr.GRPO); 0: the response budget (max new tokens)", 0.0
    )
    kl: KLConfig = field(default_factory=KLConfig)
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.gamma <= 1 or not 0 <= self.lam <= 1:
            raise ValueError(f"algorithm: expected gamma and lam in [0, 1], got {self.gamma}, {self.lam}")
        if self.loss_scale_factor < 0:
            raise ValueError(f"algorithm.loss_scale_factor: expected >= 0, got {self.loss_scale_factor}")
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ValueError(
                f"algorithm ({self.kind}): expected 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, "
                f"{self.clip_high}"
            )

    def _weights_check(self, recomputed: bool) -> None:
        """Importance weights need a recomputed old policy: in bypass mode PPO's ratio is already pi_theta / mu,
        and weights pi_old / mu would count the rollout mismatch twice."""
        if self.correction.is_level is not None and not recomputed:
            raise ValueError(
                f"algorithm.correction.is_level {self.correction.is_level!r}: expected old_log_probs = recompute (in "
                "bypass mode the ratio already is pi_theta / mu, so weights would count twice); got rollout"
            )


@dataclass
class PPOConfig(PolicyGradientConfig):
    """PPO's clipped surrogate (with dual clip) against the old policy: the rollout's log-probs (bypass mode) or a
    recomputed no-grad forward of the weights before the update."""

    kind: Literal["ppo"] = "ppo"
    dual_clip_c: float = help_field("dual-clip cap of the loss of negative advantages, x |A| (<= 1: off)", 3.0)
    old_log_probs: Literal["rollout", "recompute"] = help_field(
        "the old policy: the rollout's log-probs (bypass) or recomputed by the trainer before the update", "rollout"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._weights_check(self.old_log_probs == "recompute")


@dataclass
class GSPOConfig(PolicyGradientConfig):
    """GSPO: PPO's clip on the sequence-level ratio (geometric mean of the token ratios); aggregated per sequence
    (`agg_mode` is ignored: always seq-mean-token-mean). Defaults are the GSPO paper's clip range."""

    kind: Literal["gspo"] = "gspo"
    clip_low: float = help_field("sequence-ratio clip below 1", 3e-4)
    clip_high: float = help_field("sequence-ratio clip above 1", 4e-4)
    old_log_probs: Literal["rollout", "recompute"] = help_field(
        "the old policy: the rollout's log-probs (bypass) or recomputed by the trainer before the update", "rollout"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._weights_check(self.old_log_probs == "recompute")


@dataclass
class DecoupledConfig(PolicyGradientConfig):
    """AReaL's decoupled PPO for stale samples: the trust region is anchored at the proximal policy (recomputed
    by the trainer before the update) and each token is weighted by pi_prox / mu (mu: the rollout's behaviour
    policy), truncated at `is_cap` when set."""

    kind: Literal["decoupled"] = "decoupled"
    dual_clip_c: float = help_field("dual-clip cap of the loss of negative advantages, x |A| (<= 1: off)", 3.0)
    is_cap: float = help_field("truncate the behaviour weight pi_prox / mu at this cap (0: no cap; else >= 1)", 0.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.is_cap < 0 or 0 < self.is_cap < 1:
            raise ValueError(f"algorithm.is_cap: expected 0 (off) or >= 1, got {self.is_cap}")
        if self.correction.is_level is not None:
            raise ValueError(
                "algorithm.correction.is_level: decoupled PPO already weights each token by pi_prox / mu (truncate it "
                f"with algorithm.is_cap); expected none, got {self.correction.is_level!r}"
            )


@dataclass
class OPDConfig(PPOConfig):
    """On-policy distillation: the student samples, a teacher scores every sampled token (`teacher` section), and the
    student moves toward the teacher. `loss`: `pg`, the per-token advantage log pi_T - log pi_S of the sampled token
    (clamped at +-`log_ratio_clamp`) through PPO's clipped surrogate; `k2` / `k3`, a supervised reverse-KL estimator
    of the sampled token (gradient through log pi_S), or `topk_fkl`, the forward KL to the teacher's top-k, weighted
    by `distill_coef`. `reward_coef` > 0 adds the task
    reward's advantage (`advantage` estimator) to the pg advantage, or as a PPO term beside k2 / k3; 0: distillation
    only. PPO's keys (clip, dual clip, old log-probs) apply to the pg term. The teacher replaces the reference:
    `kl.coef` must be 0."""

    kind: Literal["opd"] = "opd"
    loss: Literal["pg", "k1", "k2", "k3", "topk_fkl"] = help_field(
        "pg (advantage log pi_T - log pi_S through PPO's clip), k2 or k3 (supervised reverse-KL estimators), topk_fkl "
        "(forward KL to the teacher's top-k, GKD; needs teacher.top_k > 0); k1 is refused: as a loss its gradient "
        "is the score function alone, which carries no signal from the teacher",
        "pg",
    )
    reward_coef: float = help_field("weight of the task reward's advantage (0: distillation only)", 0.0)
    distill_coef: float = help_field("weight of the k2 / k3 / topk_fkl distillation term (ignored by pg)", 1.0)
    log_ratio_clamp: float = help_field("clamp of the pg advantage log pi_T - log pi_S, in nats", 5.0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss == "k1":
            raise ValueError(
                "algorithm.loss: k1 (log pi_S - log pi_T as a loss) has the gradient of log pi_S alone, whose "
                "expectation is 0 and which never sees the teacher; expected pg, k2 or k3, got k1"
            )
        if self.reward_coef < 0 or not self.distill_coef > 0 or not self.log_ratio_clamp > 0:
            raise ValueError(
                f"algorithm (opd): expected reward_coef >= 0, distill_coef > 0, log_ratio_clamp > 0; got "
                f"{self.reward_coef}, {self.distill_coef}, {self.log_ratio_clamp}"
            )
        if self.kl.coef > 0:
            raise ValueError(
                f"algorithm.kl.coef: on-policy distillation pulls toward the teacher, not a reference; expected 0, got "
                f"{self.kl.coef}"
            )


AlgorithmConfig = PPOConfig | GSPOConfig | DecoupledConfig | OPDConfig
