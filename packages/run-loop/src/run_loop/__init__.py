"""One run lifecycle for every trainer app: the command line with `--resume` and its checks (`run_loop.cli`,
`run_loop.resume`), the `run` section, the run directory claimed (`run_loop.claim`), the step loop with `due()`
schedules, atomic checkpoints with the app's extras, progress bar, plots and summary. No torch, no Ray."""

from run_loop.checkpoint import Checkpoint, RunProgress, commit_checkpoint, load_latest, stage_checkpoint
from run_loop.driver import LoopSettings, RunApp, drive
from run_loop.schedule import due
from run_loop.summary import Details, Rows, RunReport, RunSummary, last_of, mean_of, summarize, write_plots

__all__ = [
    "Checkpoint",
    "Details",
    "LoopSettings",
    "Rows",
    "RunApp",
    "RunProgress",
    "RunReport",
    "RunSummary",
    "commit_checkpoint",
    "drive",
    "due",
    "last_of",
    "load_latest",
    "mean_of",
    "stage_checkpoint",
    "summarize",
    "write_plots",
]
