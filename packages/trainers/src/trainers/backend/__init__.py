"""Training backends behind the `TrainingBackend` seam: plain torch in one process (`TorchBackend`)."""

from trainers.backend.config import TorchBackendConfig
from trainers.backend.micro_batches import select_rows, split_by_token_budget, split_even
from trainers.backend.mismatch import log_prob_mismatch
from trainers.backend.protocol import TrainingBackend
from trainers.backend.state import BackendState
from trainers.backend.torch_backend import TorchBackend

__all__ = [
    "BackendState",
    "TorchBackend",
    "TorchBackendConfig",
    "TrainingBackend",
    "log_prob_mismatch",
    "select_rows",
    "split_by_token_budget",
    "split_even",
]
