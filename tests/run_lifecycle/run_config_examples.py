"""Example configs for the run_lifecycle config tests: tagged sections (frozen and not, nested, a subclass that only
changes defaults, a one-member section) inside ordinary ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class KL:
    coef: float = field(default=0.0, metadata={"help": "weight of the KL term"})
    mode: Literal["loss", "reward"] = "loss"


@dataclass(frozen=True)
class ZeroBaseline:
    kind: Literal["zero"] = "zero"


@dataclass(frozen=True)
class MeanBaseline:
    kind: Literal["mean"] = "mean"
    window: int = field(default=8, metadata={"help": "groups averaged"})


@dataclass(frozen=True)
class PPO:
    kind: Literal["ppo"] = "ppo"
    clip: float = field(default=0.2, metadata={"help": "ratio clip"})
    dual_clip: float = field(default=3.0, metadata={"help": "dual-clip cap"})
    kl: KL = field(default_factory=KL)
    baseline: ZeroBaseline | MeanBaseline = field(default_factory=ZeroBaseline, metadata={"help": "the baseline"})

    def __post_init__(self) -> None:
        if not 0 <= self.clip < 1:
            raise ValueError(f"algorithm.clip: expected in [0, 1), got {self.clip}")


@dataclass(frozen=True)
class AppPPO(PPO):
    """Only changes defaults: the kind ("ppo") is inherited."""

    clip: float = 0.1


@dataclass(frozen=True)
class GSPO(PPO):
    kind: Literal["gspo"] = "gspo"
    clip: float = 3e-4


@dataclass
class Decoupled:
    kind: Literal["decoupled"] = "decoupled"
    clip: float = field(default=0.2, metadata={"help": "ratio clip"})
    is_cap: float = field(default=0.0, metadata={"help": "behaviour weight cap (0: off)"})
    baseline: MeanBaseline = field(default_factory=lambda: MeanBaseline(window=4))

    def __post_init__(self) -> None:
        if self.is_cap < 0:
            raise ValueError(f"algorithm.is_cap: expected >= 0, got {self.is_cap}")


@dataclass(frozen=True)
class Native:
    kind: Literal["native"] = "native"
    slots: int = field(default=256, metadata={"help": "KV-cache slots"})


@dataclass(frozen=True)
class VLLM:
    kind: Literal["vllm"] = "vllm"
    url: str | None = field(default=None, metadata={"help": "server URL; none: launch one"})
    slots: int = field(default=64, metadata={"help": "KV-cache slots"})


@dataclass(frozen=True)
class Rollout:
    samples: int = field(default=8, metadata={"help": "responses per prompt"})
    engine: Native | VLLM = field(default_factory=Native, metadata={"help": "the rollout engine"})


@dataclass
class Backend:
    kind: Literal["torch"] = "torch"
    threads: int = 1


@dataclass
class App:
    seed: int = 0
    algorithm: AppPPO | GSPO | Decoupled = field(default_factory=AppPPO, metadata={"help": "the policy loss"})
    rollout: Rollout = field(default_factory=Rollout)
    backend: Backend = field(default_factory=Backend)


@dataclass
class Tuned:
    """The section's declared default instance differs from its class defaults."""

    algorithm: AppPPO | GSPO | Decoupled = field(default_factory=lambda: AppPPO(clip=0.15))


@dataclass(frozen=True)
class Required:
    """A tagged section without a default: its kind must be given."""

    engine: Native | VLLM
    seed: int = 0


@dataclass(frozen=True)
class TaskName:
    name: str = "toy"


@dataclass(frozen=True)
class OneKey:
    """An ordinary section with one key: `--task x` must not be read as `--task.name x`."""

    task: TaskName = field(default_factory=TaskName)
    percent: float = field(default=0.5, metadata={"help": "share of prompts (%)"})
