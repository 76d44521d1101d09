"""The FlowGRPO app installs no LLM machinery: `uv sync --package flow-grpo` into an empty environment holds neither
the MoE models, the tasks nor any engine, and the app runs there (two tiny steps, with Ray's rollouter off)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LLM_MODULES = ("moe_models", "rl_tasks", "engine_adapters")
TINY = (
    "--warmup.steps 20 --reward.steps 40 --model.hidden 32 --model.depth 1 --rollout.prompts_per_step 2 "
    "--rollout.samples_per_prompt 2 --sampler.num_steps 4 --sampler.window_hi 2 --validation.samples_per_class 1 "
    "--validation.num_steps 4 --validation.grid_per_class 0 --run.progress false --run.steps 2 --pipeline.ray false"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv on PATH to build the environment"),
]


def test_the_flow_app_environment_holds_no_llm_module_and_the_app_runs_there(tmp_path: Path) -> None:
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(tmp_path / "venv")}
    env.pop("VIRTUAL_ENV", None)
    sync = ["uv", "sync", "--locked", "--package", "flow-grpo", "--no-dev", "--quiet"]
    subprocess.run(sync, cwd=ROOT, env=env, check=True, timeout=600)
    python = str(tmp_path / "venv" / "bin" / "python")
    probe = f"import importlib.util as u; print([m for m in {LLM_MODULES!r} if u.find_spec(m)])"
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert found.stdout.strip() == "[]"
    run = [python, "-m", "flow_grpo", *TINY.split(), "--run.dir", str(tmp_path / "run")]
    run += ["--run.warmup_cache", str(tmp_path / "cache")]
    done = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 3  # step 0 (validation), 1, 2
