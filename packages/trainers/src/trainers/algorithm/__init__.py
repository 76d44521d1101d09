"""Training algorithms behind the `Algorithm` seam (PPO, GSPO, decoupled PPO, on-policy distillation) and their
configs. Exports are lazy: `trainers.algorithm.config` stays importable without torch."""

from run_lifecycle.lazy import lazy_exports

_EXPORTS = {
    "Algorithm": "trainers.algorithm.protocol",
    "AlgorithmConfig": "trainers.algorithm.config",
    "CorrectionConfig": "trainers.algorithm.correction",
    "Decoupled": "trainers.algorithm.decoupled",
    "DecoupledConfig": "trainers.algorithm.config",
    "GSPO": "trainers.algorithm.gspo",
    "GSPOConfig": "trainers.algorithm.config",
    "KLConfig": "trainers.algorithm.config",
    "LossInputs": "trainers.algorithm.loss_io",
    "LossOutputs": "trainers.algorithm.loss_io",
    "OPD": "trainers.algorithm.opd",
    "OPDConfig": "trainers.algorithm.config",
    "PPO": "trainers.algorithm.ppo",
    "PPOConfig": "trainers.algorithm.config",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
