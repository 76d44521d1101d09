"""The `Algorithm` each kind of the `algorithm` section builds (the seam's registry: kind -> class). The sections
(`trainers.algorithm.config`) import no algorithm; this module imports both."""

from __future__ import annotations

from trainers.algorithm.config import AlgorithmConfig
from trainers.algorithm.decoupled import Decoupled
from trainers.algorithm.gspo import GSPO
from trainers.algorithm.opd import OPD
from trainers.algorithm.ppo import PPO
from trainers.algorithm.protocol import Algorithm

ALGORITHMS: dict[str, type[PPO | GSPO | Decoupled | OPD]] = {
    "ppo": PPO,
    "gspo": GSPO,
    "decoupled": Decoupled,
    "opd": OPD,
}


def build_algorithm(cfg: AlgorithmConfig, *, max_new_tokens: int) -> Algorithm:
    """The algorithm of `cfg.kind`, from its section; `max_new_tokens`: the response budget (its loss
    normalisations may use it)."""
    if cfg.kind not in ALGORITHMS:
        raise ValueError(f"algorithm.kind: expected one of {list(ALGORITHMS)}, got {cfg.kind!r}")
    return ALGORITHMS[cfg.kind](cfg, max_new_tokens=max_new_tokens)  # type: ignore[arg-type]
