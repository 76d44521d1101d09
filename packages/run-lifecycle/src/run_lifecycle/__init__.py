"""One run's lifecycle, for every trainer app (standard library, numpy, matplotlib and tqdm; no torch, no Ray):

- configs: typed nested dataclasses from defaults < TOML file < `--section.key value` flags (`arguments`, `fields`,
  `loader`, `schema`, `writer`, `markdown`). A field annotated with a union of config dataclasses, each declaring
  `kind: Literal["<name>"] = "<name>"`, is a tagged section: `--section.kind <name>` (or `--section <name>`,
  `section = "<name>"` in TOML) chooses the member;
- the run directory: metrics JSONL, a live progress line, PNG plots, the run lock (`run_dir`, `metrics_log`,
  `progress`, `plots`, `run_lock`);
- the loop: the command line with `--resume` and its checks (`cli`, `resume`), the `run` section, the run directory
  claimed (`claim`), the step loop with `due()` schedules, atomic checkpoints with the app's extras, the summary
  (`driver`, `checkpoint`, `summary`).

Exports are lazy (PEP 562): importing the package or a config module imports the standard library only, so a
command line's `--help` is instant.
"""

from __future__ import annotations

from run_lifecycle.lazy import lazy_exports

_EXPORTS = {
    "Checkpoint": "run_lifecycle.checkpoint",
    "Details": "run_lifecycle.summary",
    "Leaf": "run_lifecycle.fields",
    "LoopSettings": "run_lifecycle.driver",
    "MetricsLog": "run_lifecycle.metrics_log",
    "Panel": "run_lifecycle.plots",
    "Progress": "run_lifecycle.progress",
    "Rows": "run_lifecycle.summary",
    "RunApp": "run_lifecycle.driver",
    "RunDir": "run_lifecycle.run_dir",
    "RunLock": "run_lifecycle.run_lock",
    "RunProgress": "run_lifecycle.checkpoint",
    "RunReport": "run_lifecycle.summary",
    "RunSummary": "run_lifecycle.summary",
    "add_arguments": "run_lifecycle.arguments",
    "allocate_run_dir": "run_lifecycle.run_lock",
    "commit_checkpoint": "run_lifecycle.checkpoint",
    "drive": "run_lifecycle.driver",
    "due": "run_lifecycle.schedule",
    "from_dict": "run_lifecycle.loader",
    "last_of": "run_lifecycle.summary",
    "leaves": "run_lifecycle.fields",
    "load_latest": "run_lifecycle.checkpoint",
    "mean_of": "run_lifecycle.summary",
    "parse_config": "run_lifecycle.arguments",
    "plot_histogram": "run_lifecycle.plots",
    "plot_histograms": "run_lifecycle.plots",
    "plot_metrics": "run_lifecycle.plots",
    "read_metrics": "run_lifecycle.metrics_log",
    "resolve": "run_lifecycle.arguments",
    "stage_checkpoint": "run_lifecycle.checkpoint",
    "summarize": "run_lifecycle.summary",
    "to_dict": "run_lifecycle.writer",
    "to_markdown": "run_lifecycle.markdown",
    "to_toml": "run_lifecycle.writer",
    "write_plots": "run_lifecycle.summary",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
