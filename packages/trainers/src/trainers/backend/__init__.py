"""Training backends behind the compute-only `TrainingBackend` seam: plain torch in one process or FSDP2
(`TorchBackend`). Exports are lazy: `trainers.backend.config` stays importable without torch."""

from run_lifecycle.lazy import lazy_exports

_EXPORTS = {
    "BackendConfig": "trainers.backend.config",
    "BackendState": "trainers.backend.state",
    "DataParallel": "trainers.backend.data_parallel",
    "OptimConfig": "trainers.backend.config",
    "OptimisedModule": "trainers.backend.optimised_module",
    "TorchBackend": "trainers.backend.torch_backend",
    "TorchBackendConfig": "trainers.backend.config",
    "TrainingBackend": "trainers.backend.protocol",
    "log_prob_mismatch": "trainers.backend.mismatch",
    "select_rows": "trainers.backend.micro_batches",
    "split_by_token_budget": "trainers.backend.micro_batches",
    "split_even": "trainers.backend.micro_batches",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
