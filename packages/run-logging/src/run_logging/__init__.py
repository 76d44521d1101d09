"""A run directory: metrics JSONL, a live progress line and PNG plots. No torch."""

from run_logging.metrics_log import MetricsLog, read_metrics
from run_logging.plots import Panel, plot_histogram, plot_histograms, plot_metrics
from run_logging.progress import Progress
from run_logging.run_dir import RunDir
from run_logging.run_lock import RunLock, allocate_run_dir

__all__ = [
    "MetricsLog",
    "Panel",
    "Progress",
    "RunDir",
    "RunLock",
    "allocate_run_dir",
    "plot_histogram",
    "plot_histograms",
    "plot_metrics",
    "read_metrics",
]
