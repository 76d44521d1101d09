"""TRL's GRPOTrainer on our task and warm-up base: the TRL half of `benchmarks/vs_trl.py` (run in `.trl-env`).

It builds the task, the base checkpoint (from the shared warm-up cache) and the tokenizer exactly as
`apps/sync_ppo` does from the same flags, so prompts, reward, max new tokens and the starting weights are ours.
TRL then trains `--steps` steps of `prompts_per_step x samples_per_prompt` completions with the app's optimiser
settings, and the trained model is scored on the whole validation split by greedy decoding (`evaluate_greedy`,
the same reward). Writes `result.json` to `--out`: steady-state samples/s (step 1, which pays for start-up, left
out, as in our runs), per-step seconds, greedy accuracy of the base and of the trained model.

Usage (normally from vs_trl.py): `.trl-env/bin/python benchmarks/trl_grpo.py --out DIR -- <sync_ppo flags>`
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from datasets import Dataset
from engine_adapters.native.greedy_eval import evaluate_greedy
from moe_models import load_pretrained, load_tokenizer
from rl_tasks.episode import TaskTokenizer
from rl_tasks.example import TaskExample
from rl_tasks.renderer import Renderer
from rl_tasks.reward import RewardFn
from sync_ppo.cli import parse
from trainers.recipe.setup import check_run
from trainers.warmup import ensure_base_checkpoint
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


class StepClock(TrainerCallback):
    """Wall time at the end of each optimiser step (seconds since `train` began)."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.ends: list[float] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter() - self.t0)


def make_reward(reward_fn: RewardFn, examples: list[TaskExample], tokenizer: TaskTokenizer, eos_id: int):
    """TRL reward function: decodes each completion's ids with our tokenizer (EOS and after dropped)."""

    def reward(
        prompts: list, completions: list, completion_ids: list[list[int]], example_index: list[int], **kwargs: object
    ) -> list[float]:
        out = []
        for ids, i in zip(completion_ids, example_index, strict=True):
            ids = list(ids)
            text = tokenizer.decode(ids[: ids.index(eos_id)] if eos_id in ids else ids, skip_special_tokens=True)
            out.append(float(reward_fn(text, examples[i]).reward))
        return out

    return reward


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2, help="torch threads (this machine: 2 cores)")
    p.add_argument("flags", nargs="*", help="sync_ppo flags after --: task, warm-up, rollout, optim, run.steps")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg, _ = parse(args.flags)
    task = cfg.task.build()
    base = ensure_base_checkpoint(task, cfg.warmup, Path(cfg.run.warmup_cache).resolve())
    ours = load_tokenizer(base.checkpoint_dir)
    renderer = Renderer(ours, task.prompt_format)  # type: ignore[arg-type]
    hf_tok = AutoTokenizer.from_pretrained(base.checkpoint_dir)
    train = list(task.splits.train)
    rows = [{"prompt": ours.decode(renderer.prompt_ids(ex)), "example_index": i} for i, ex in enumerate(train)]
    for row, ex in zip(rows[:64], train[:64], strict=True):  # TRL tokenises text: it must give our prompt ids
        got = hf_tok(row["prompt"], add_special_tokens=False)["input_ids"]
        if got != renderer.prompt_ids(ex):
            raise ValueError(f"HF tokenizer: expected {renderer.prompt_ids(ex)}, got {got} for {ex.prompt!r}")
    max_new = check_run(cfg).max_new_tokens
    n_per_step = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    o = cfg.optim
    targs = GRPOConfig(
        output_dir=str(args.out / "trl"),
        max_steps=cfg.run.steps,
        seed=cfg.run.seed,
        use_cpu=True,
        per_device_train_batch_size=n_per_step,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=cfg.rollout.samples_per_prompt,
        max_completion_length=max_new,
        temperature=cfg.rollout.temperature,
        top_p=1.0,
        top_k=0,
        learning_rate=o.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=o.grad_clip,
        adam_beta1=o.beta1,
        adam_beta2=o.beta2,
        weight_decay=o.weight_decay,
        beta=0.0,
        epsilon=cfg.algorithm.clip_low,
        epsilon_high=cfg.algorithm.clip_high,
        num_iterations=1,
        loss_type="dapo",
        scale_rewards="group",
        router_aux_loss_coef=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        fp16=False,
        disable_dropout=True,
        dataloader_num_workers=0,
    )
    model = AutoModelForCausalLM.from_pretrained(base.checkpoint_dir, dtype=torch.float32)
    clock = StepClock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_reward(task.reward_fn, train, ours, ours.eos_id)],
        args=targs,
        train_dataset=Dataset.from_list(rows),
        processing_class=hf_tok,
        callbacks=[clock],
    )
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    final = args.out / "trl-final"
    trainer.save_model(str(final))
    val = list(task.splits.validation)
    if cfg.validation.max_prompts:
        val = val[: cfg.validation.max_prompts]
    acc = {
        name: evaluate_greedy(load_pretrained(d).eval(), renderer, val, task.reward_fn, max_new_tokens=max_new).accuracy
        for name, d in (("base", base.checkpoint_dir), ("trained", final))
    }
    steps = [b - a for a, b in zip([0.0, *clock.ends], clock.ends, strict=False)]
    steady = steps[1:] or steps
    result = {
        "samples_per_s": n_per_step * len(steady) / sum(steady),
        "step_s": steps,
        "train_wall_s": wall,
        "samples": n_per_step * len(steps),
        "base_acc": acc["base"],
        "val_acc": acc["trained"],
    }
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
