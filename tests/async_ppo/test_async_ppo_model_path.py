"""`apps/async_ppo --model.path DIR` on a checkpoint as a user brings it at production size (transformers'
Qwen3MoeForCausalLM with a 151,936-row embedding, a 151,669-id Qwen-layout tokenizer, config.json's eos
`<|endoftext|>` and the chat's `<|im_end|>`), as a user runs it: three steps at the defaults, no sampled id beyond the
tokenizer in any dump, responses ending at an eos, the policy exported in the last checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("transformers")
sys.path.insert(0, str(ROOT / "scripts"))
from make_hf_checkpoint import make_checkpoint  # noqa: E402

QWEN_TOKENIZER, IM_END, END_OF_TEXT = 151_669, 151_645, 151_643


@pytest.mark.slow
def test_a_full_size_checkpoint_runs_three_async_steps_and_exports(tmp_path: Path) -> None:
    checkpoint = make_checkpoint(tmp_path / "ckpt", eos_probability=0.2)
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    argv = [sys.executable, str(ROOT / "apps" / "async_ppo"), "--model.path", str(checkpoint), "--run.steps", "3",
            "--run.dir", str(tmp_path / "run"), "--run.progress", "false"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for f in (tmp_path / "run" / "rollouts").glob("*.jsonl") for line in f.open()]
    ids = [t for r in rows for t in r["response_ids"]]
    assert ids and max(ids) < QWEN_TOKENIZER
    stopped = [r["response_ids"] for r in rows if r["stop_reason"] == "stop"]
    assert stopped and all(s[-1] in (IM_END, END_OF_TEXT) for s in stopped)
    policy = tmp_path / "run" / "checkpoints" / "3" / "policy"
    assert json.loads((policy / "generation_config.json").read_text())["eos_token_id"] == [IM_END, END_OF_TEXT]
    assert json.loads((policy / "config.json").read_text())["vocab_size"] == 151_936
