"""Command line: `uv run apps/flow_grpo [--config file.toml] [--section.key value ...] [--resume]`.

Only the standard library, run_lifecycle and the config dataclasses are imported before the arguments are parsed,
so `--help` answers at once; torch comes with `flow_grpo.setup`.
"""

from __future__ import annotations

from run_lifecycle.cli import app_parser, resolve_run, run_app

from flow_grpo.config import FlowConfig

DESCRIPTION = """\
FlowGRPO for a small class-conditional flow-matching model on 8x8 digits: RL on the classifier probability of
the requested class. Each step: sample (ODE steps, SDE steps with log-probs inside a window) -> reward -> group
advantages -> clipped per-step policy loss -> push weights -> validate every k steps (fixed-seed ODE sampler,
image grid in plots/samples_<step>.png). Settings: defaults < --config FILE (TOML) < --section.key value; the
reward section is chosen with --reward.kind. Artifacts go to the run directory (metrics.jsonl, config.toml,
validation/, checkpoints/, plots/)."""

# keys (or prefixes ending in ".") that decide which images a step trains on
DATA_SHAPING = ("run.seed", "model.", "warmup.", "reward.", "rollout.", "sampler.", "pipeline.max_staleness")


def parse(argv: list[str] | None = None) -> tuple[FlowConfig, bool]:
    parser = app_parser(
        "flow_grpo",
        DESCRIPTION,
        FlowConfig,
        FlowConfig.RUNS_ROOT,
        data_settings="seed, model, warm-up, reward, rollout, sampler, max_staleness",
    )
    return resolve_run(FlowConfig, parser.parse_args(argv), FlowConfig.RUNS_ROOT, DATA_SHAPING)


def main(argv: list[str] | None = None) -> None:
    cfg, resume = run_app("flow_grpo", parse, argv)
    from flow_grpo.setup import train

    print(train(cfg, resume=resume).line())
