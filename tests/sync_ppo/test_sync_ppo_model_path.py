"""`apps/sync_ppo --model.path DIR` on a checkpoint of every supported family that transformers' own class wrote
(random weights, the task's tokenizer files beside it): no warm-up, two steps train and validate, and the run's base is
that checkpoint. The run is the app as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")


def _hf_model(family: str, vocab: int, eos: int, pad: int) -> torch.nn.Module:
    """A small random model of `family` built by transformers (not by moe_models)."""
    t = transformers
    common = {"vocab_size": vocab, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    ids = {"eos_token_id": eos, "pad_token_id": pad, "bos_token_id": None}
    configs = {
        "qwen3_moe": lambda: t.Qwen3MoeConfig(
            **common, **ids, intermediate_size=96, moe_intermediate_size=32, num_key_value_heads=2, head_dim=32,
            num_experts=4, num_experts_per_tok=2,
        ),
        "qwen2_moe": lambda: t.Qwen2MoeConfig(
            **common, **ids, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=48,
            num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        ),
        "mixtral": lambda: t.MixtralConfig(
            **common, **ids, intermediate_size=48, num_key_value_heads=2, head_dim=32, num_local_experts=4,
            num_experts_per_tok=2,
        ),
        "deepseek_v3": lambda: t.DeepseekV3Config(
            **common, **ids, intermediate_size=96, moe_intermediate_size=32, num_key_value_heads=4,
            n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1,
            first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=16,
            v_head_dim=16,
        ),
        "gpt_oss": lambda: t.GptOssConfig(
            **common, **ids, intermediate_size=32, num_key_value_heads=2, head_dim=32, num_local_experts=4,
            num_experts_per_tok=2, sliding_window=8,
        ),
    }  # fmt: skip
    torch.manual_seed(0)
    return getattr(t, {"qwen3_moe": "Qwen3MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                       "mixtral": "MixtralForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                       "gpt_oss": "GptOssForCausalLM"}[family])(configs[family]())  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe", "mixtral", "deepseek_v3", "gpt_oss"])
def test_sync_ppo_trains_a_transformers_checkpoint_of_every_family(family: str, tmp_path: Path) -> None:
    from rl_tasks import ToyTaskConfig
    from rl_tasks.task_tokenizer import build_task_tokenizer

    task_flags = ["--task.train_size", "64", "--task.val_size", "8"]
    tokenizer = build_task_tokenizer(ToyTaskConfig(addition_weight=0.0, train_size=64, val_size=8).build())
    checkpoint = tmp_path / "ckpt"
    _hf_model(family, tokenizer.vocab_size, tokenizer.eos_id, tokenizer.pad_id).save_pretrained(str(checkpoint))
    tokenizer.save(checkpoint)
    flags = ["--model.path", str(checkpoint), "--run.steps", "2", "--run.dir", str(tmp_path / "run"),
             "--run.warmup_cache", str(tmp_path / "warmup"), "--run.progress", "false",
             "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "2", *task_flags]  # fmt: skip
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    done = subprocess.run(
        [sys.executable, str(ROOT / "apps" / "sync_ppo"), *flags], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rows} >= {0, 1, 2} and any("val/greedy_acc" in r for r in rows)
    assert not (tmp_path / "warmup").exists()  # no warm-up: the checkpoint is the base
    assert json.loads((checkpoint / "config.json").read_text())["model_type"] == family
