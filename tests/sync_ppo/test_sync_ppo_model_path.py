"""`apps/sync_ppo --model.path DIR` on a checkpoint of every supported family that transformers' own class wrote
(random weights, the task's tokenizer files beside it): no warm-up, two steps train and validate, and the run's base is
that checkpoint. The run is the app as a user runs it (a subprocess). At production size (a 151,936-row embedding,
a 151,669-id Qwen-layout tokenizer, config.json's eos `<|endoftext|>` and the chat's `<|im_end|>`): no sampled id
beyond the tokenizer, responses end at the chat's eos, peak RSS under 4 GB, the final checkpoint's policy loads in
transformers with our logits; a tokenizer saved by transformers itself on GSM8K-style rows. A checkpoint that
cannot work is refused while the command line is parsed (exit 2, no run directory)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
transformers = pytest.importorskip("transformers")
sys.path.insert(0, str(ROOT / "scripts"))
from make_hf_checkpoint import make_checkpoint  # noqa: E402

QWEN_TOKENIZER, IM_END, END_OF_TEXT = 151_669, 151_645, 151_643


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


def test_a_checkpoint_whose_tokenizer_outgrows_its_embedding_exits_2_while_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from moe_models import MoEConfig, MoEForCausalLM, save_pretrained
    from rl_tasks import ToyTaskConfig
    from rl_tasks.task_tokenizer import build_task_tokenizer
    from sync_ppo.cli import main

    tokenizer = build_task_tokenizer(ToyTaskConfig(addition_weight=0.0).build())
    small = MoEConfig.preset("tiny", vocab_size=tokenizer.vocab_size - 1, num_hidden_layers=1)
    save_pretrained(MoEForCausalLM(small), tmp_path / "ckpt", tokenizer)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--model.path", str(tmp_path / "ckpt")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("sync_ppo: error: tokenizer: got") and "embedding rows" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no run directory


def _run(flags: list[str], run_dir: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """The app as a user runs it; returns the process and its peak RSS in GB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    argv = [sys.executable, str(ROOT / "apps" / "sync_ppo"), *flags, "--run.dir", str(run_dir),
            "--run.warmup_cache", str(tmp_path / "warmup"), "--run.progress", "false"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    assert peak >= before  # the largest child so far: this one, unless an earlier child was larger
    return done, peak / 2**20


def _responses(run_dir: Path) -> list[dict[str, object]]:
    return [
        json.loads(line) for f in sorted((run_dir / "rollouts").glob("*.jsonl")) for line in f.read_text().splitlines()
    ]


@pytest.mark.slow
def test_a_full_size_checkpoint_trains_within_4_gb_samples_its_tokenizer_and_exports(tmp_path: Path) -> None:
    checkpoint = make_checkpoint(tmp_path / "ckpt", eos_probability=0.2)
    done, peak_gb = _run(["--model.path", str(checkpoint), "--run.steps", "2"], tmp_path / "run", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert peak_gb <= 4.0
    rows = _responses(tmp_path / "run")
    ids = [t for r in rows for t in r["response_ids"]]  # type: ignore[union-attr]
    assert ids and max(ids) < QWEN_TOKENIZER
    stopped = [r["response_ids"] for r in rows if r["stop_reason"] == "stop"]
    assert len(stopped) > len(rows) // 2 and all(s[-1] in (IM_END, END_OF_TEXT) for s in stopped)  # type: ignore[index]
    assert all(IM_END not in r["response_ids"][:-1] for r in rows)  # type: ignore[index]
    policy = tmp_path / "run" / "checkpoints" / "2" / "policy"
    from moe_models import load_pretrained

    ours = load_pretrained(policy, vocab_size=QWEN_TOKENIZER).eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32).eval()
    ids_in = torch.tensor([[151_644, 872, 198, 100, 200, 300, IM_END, 198, 151_644, 77091, 198]])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids_in).logits[..., :QWEN_TOKENIZER], ours(ids_in).logits, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_a_tokenizer_saved_by_transformers_on_gsm8k_style_rows_runs_with_room_to_reason(tmp_path: Path) -> None:
    rows = tmp_path / "gsm8k.jsonl"
    rows.write_text("".join(
        json.dumps({"prompt": [{"role": "user", "content": f"Ken has {a} cards and buys {b} more. How many now?"}],
                    "reward_model": {"ground_truth": str(a + b)}, "data_source": "gsm8k_style"}) + "\n"
        for a in range(3, 9) for b in range(2, 6)
    ))  # fmt: skip
    checkpoint = make_checkpoint(tmp_path / "ckpt", tokenizer_layout="transformers", eos_probability=0.02)
    assert (checkpoint / "chat_template.jinja").is_file()
    flags = ["--model.path", str(checkpoint), "--task", "dataset", "--task.train_file", str(rows),
             "--task.val_size", "4", "--task.reward", "gsm8k", "--run.steps", "2", "--rollout.prompts_per_step", "2",
             "--rollout.samples_per_prompt", "2", "--validation.max_prompts", "2"]  # fmt: skip
    done, _ = _run(flags, tmp_path / "run", tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    config = (tmp_path / "run" / "config.toml").read_text()
    assert "max_new_tokens = 0" in config and "response_tokens = 1024" in config
    longest = max(len(r["response_ids"]) for r in _responses(tmp_path / "run"))  # type: ignore[arg-type]
    assert longest > 16  # the budget is 1024 tokens, not the answer's 3
