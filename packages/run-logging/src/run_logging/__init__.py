"""A run directory: metrics JSONL, a live progress line and PNG plots. No torch."""

from run_logging.metrics_log import MetricsLog, read_metrics
from run_logging.plots import Panel, plot_histogram, plot_metrics
from run_logging.progress import Progress
from run_logging.run_dir import RunDir

__all__ = ["MetricsLog", "Panel", "Progress", "RunDir", "plot_histogram", "plot_metrics", "read_metrics"]
