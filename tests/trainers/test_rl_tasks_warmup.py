"""Supervised warm-up: loss masking of single- and multi-turn demonstrations, the on-disk cache, a checkpoint
that reloads to the same accuracy, and a short warm-up of every task kind."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from engine_adapters.native.greedy_eval import evaluate_greedy
from moe_models import ChatTokenizer, MoEConfig, MoEForCausalLM, load_pretrained, load_tokenizer
from rl_tasks.calculator_task import CalculatorTaskConfig
from rl_tasks.dataset_task import DatasetTaskConfig
from rl_tasks.episode import TaskTokenizer
from rl_tasks.example import TaskExample
from rl_tasks.model_config import ModelConfig
from rl_tasks.renderer import Renderer
from rl_tasks.scratchpad_task import ScratchpadTaskConfig
from rl_tasks.sort_trace import SortTraceSource
from rl_tasks.sorting import SortSource
from rl_tasks.task import Piece, answer_demonstration
from rl_tasks.task_tokenizer import task_renderer
from rl_tasks.toy_task import ToyTaskConfig, build_splits, toy_reward_fn
from trainers.warmup import (
    METADATA_FILE,
    WarmupConfig,
    accumulate_gradients,
    build_base_model_config,
    build_task_tokenizer,
    encode_training_batch,
    ensure_base_checkpoint,
    micro_batches,
    train_warmup,
    warmup_key,
)

# short sorts keep greedy evaluation to a few length buckets and at most 5 new tokens
SMALL_TASK = ToyTaskConfig(train_size=300, val_size=12, seed=5, sort=SortSource(2, 4))
FEW_STEPS = WarmupConfig(steps=2, examples_per_step=8, lr_warmup_steps=0, torch_threads=1)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """One intra-op thread: these models are tiny, and extra threads only spin on a shared 2-core box."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _chat(tok: TaskTokenizer, *messages: tuple[str, str]) -> list[int]:
    """The ids of the whole rendered chat (what transformers' apply_chat_template gives for these messages)."""
    assert isinstance(tok, ChatTokenizer)
    return tok.encode(tok.render([{"role": r, "content": c} for r, c in messages], add_generation_prompt=False))


def test_training_batch_puts_loss_only_on_answer_and_eos_targets() -> None:
    renderer = task_renderer(SMALL_TASK)
    tok = renderer.tokenizer
    examples = [TaskExample("a", "addition", "1+2=", "3"), TaskExample("b", "sort", "sort:21=", "12")]
    ids, attn, loss_mask = encode_training_batch(renderer, examples, answer_demonstration)
    assert loss_mask.shape == (2, ids.shape[1] - 1)
    for row, ex in enumerate(examples):
        targets = ids[row, 1:][loss_mask[row].bool()].tolist()
        assert targets == [*tok.encode(ex.ground_truth), tok.eos_id]
        whole = _chat(tok, ("user", ex.prompt), ("assistant", ex.ground_truth))  # ends with EOS, then a newline
        assert ids[row, : int(attn[row].sum())].tolist() == whole[:-1]
    assert ids[0, -1].item() == tok.pad_id and ids[0, 0].item() == tok.encode("<|im_start|>")[0]


def test_multi_turn_batch_trains_on_every_turn_and_its_eos_never_on_observations() -> None:
    task = CalculatorTaskConfig(train_size=20, val_size=2).build()
    renderer = task_renderer(task)
    tok = renderer.tokenizer
    short, long = TaskExample("s", "calculator", "1,2:", "3"), TaskExample("l", "calculator", "12,34,56:", "102")
    ids, attn, loss_mask = encode_training_batch(renderer, [short, long], task.demonstration)
    chat = [("user", "12,34,56:"), ("assistant", "12+34"), ("tool", "=46;"), ("assistant", "46+56")]
    row = _chat(tok, *chat, ("tool", "=102;"), ("assistant", "#102"))[:-1]  # the template's ids up to the last EOS
    assert ids[1].tolist() == row and int(attn[1].sum()) == len(row) == ids.shape[1]
    eos = [tok.eos_id]
    trained = [*tok.encode("12+34"), *eos, *tok.encode("46+56"), *eos, *tok.encode("#102"), *eos]
    assert ids[1, 1:][loss_mask[1].bool()].tolist() == trained
    short_row = _chat(tok, ("user", "1,2:"), ("assistant", "1+2"), ("tool", "=3;"), ("assistant", "#3"))[:-1]
    assert ids[0, : len(short_row)].tolist() == short_row and int(attn[0].sum()) == len(short_row)
    assert not loss_mask[0, len(short_row) - 1 :].any()  # padding is never a target
    assert task.demonstration(short) == (Piece("1+2", True), Piece("=3;", False), Piece("#3", True))


def test_plain_format_trains_on_the_raw_prompt_and_observations() -> None:
    task = dataclasses.replace(CalculatorTaskConfig(train_size=20, val_size=2), prompt_format="plain").build()
    renderer = task_renderer(task)
    tok = renderer.tokenizer
    ids, _, loss_mask = encode_training_batch(
        renderer, [TaskExample("s", "calculator", "1,2:", "3")], task.demonstration
    )
    eos = [tok.eos_id]
    assert ids[0].tolist() == [
        *tok.encode("1,2:"),
        *tok.encode("1+2"),
        *eos,
        *tok.encode("=3;"),
        *tok.encode("#3"),
        *eos,
    ]
    assert ids[0, 1:][loss_mask[0].bool()].tolist() == [*tok.encode("1+2"), *eos, *tok.encode("#3"), *eos]


def test_supervised_steps_reduce_answer_loss() -> None:
    renderer = task_renderer(SMALL_TASK)
    tok = renderer.tokenizer
    cfg = MoEConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=1, head_dim=16)
    torch.manual_seed(0)
    model = MoEForCausalLM(cfg)
    task = SMALL_TASK.build()
    first = train_warmup(model, renderer, task, WarmupConfig(steps=1, examples_per_step=16, lr_warmup_steps=0))
    later = train_warmup(model, renderer, task, WarmupConfig(steps=25, examples_per_step=16, lr=3e-3, seed=1))
    assert first is not None and later is not None
    assert first > math.log(tok.vocab_size) - 0.5  # a random model is near uniform
    assert later < first - 0.8


def test_micro_batches_keep_a_batch_that_fits_whole_and_split_a_long_tail_by_length() -> None:
    assert micro_batches([5, 3, 4], budget=15) == [[0, 1, 2]]  # fits: one forward, rows in input order
    groups = micro_batches([3, 40, 5, 38, 4, 100], budget=80)
    assert groups == [[5], [1, 3], [2, 4, 0]]  # longest first; a row over the budget alone
    assert sorted(r for g in groups for r in g) == list(range(6))


def test_micro_batched_warmup_gradients_equal_one_whole_batch() -> None:
    task = ScratchpadTaskConfig(train_size=200, val_size=4, sort=SortTraceSource(max_len=9, length_decay=1.0)).build()
    renderer = task_renderer(task)
    tok = renderer.tokenizer
    cfg = MoEConfig.preset("tiny", vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=1, head_dim=16)
    torch.manual_seed(0)
    model = MoEForCausalLM(cfg)
    batch = task.splits.train[:16]
    grads, losses = [], []
    for budget in (10**9, 256):  # one padded forward, then length-sorted parts of at most 256 padded tokens
        model.zero_grad(set_to_none=True)
        losses.append(accumulate_gradients(model, renderer, batch, task, budget))
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert len(micro_batches([len(tok.encode(e.prompt)) + 40 for e in batch], 256)) > 2  # really split
    assert losses[1] == pytest.approx(losses[0], rel=1e-6) and grads[0].keys() == grads[1].keys()
    for name, whole in grads[0].items():
        torch.testing.assert_close(grads[1][name], whole, rtol=1e-4, atol=1e-7, msg=name)


def test_zero_steps_report_no_loss() -> None:
    renderer = task_renderer(SMALL_TASK)
    model = MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=renderer.tokenizer.vocab_size))
    assert train_warmup(model, renderer, SMALL_TASK.build(), WarmupConfig(steps=0)) is None


def test_key_changes_with_everything_that_changes_weights() -> None:
    tok = build_task_tokenizer(SMALL_TASK.build())
    model_cfg = build_base_model_config(SMALL_TASK, FEW_STEPS, tok)
    base = warmup_key(SMALL_TASK, FEW_STEPS, model_cfg, tok)
    threads = WarmupConfig(steps=2, examples_per_step=8, lr_warmup_steps=0, torch_threads=None)
    assert base == warmup_key(SMALL_TASK, threads, model_cfg, tok)
    more = WarmupConfig(steps=3, examples_per_step=8, lr_warmup_steps=0)
    assert base != warmup_key(SMALL_TASK, more, model_cfg, tok)
    assert base != warmup_key(ToyTaskConfig(train_size=300, val_size=12, seed=6), FEW_STEPS, model_cfg, tok)
    assert base != warmup_key(SMALL_TASK, FEW_STEPS, model_cfg.replace(num_experts=4), tok)
    plain = dataclasses.replace(SMALL_TASK, prompt_format="plain")
    assert base != warmup_key(plain, FEW_STEPS, model_cfg, tok)
    other = build_task_tokenizer(CalculatorTaskConfig(train_size=20, val_size=2).build())  # merges "tool"
    assert base != warmup_key(SMALL_TASK, FEW_STEPS, model_cfg, other)  # the tokenizer's files are in the key
    assert base == warmup_key(SMALL_TASK.build(), FEW_STEPS, model_cfg, tok)  # a config keys as the task it builds


def test_checkpoint_is_built_once_cached_and_rebuilt_when_missing(tmp_path: Path) -> None:
    first = ensure_base_checkpoint(SMALL_TASK, FEW_STEPS, tmp_path)
    assert not first.cached and first.checkpoint_dir == tmp_path / f"warmup-{first.key}"
    names = {p.name for p in first.checkpoint_dir.iterdir()}
    assert {"config.json", "tokenizer.json", METADATA_FILE} <= names
    assert [p.name for p in tmp_path.iterdir()] == [first.checkpoint_dir.name]  # no temporary left behind
    meta = json.loads((first.checkpoint_dir / METADATA_FILE).read_text())
    assert meta["key"] == first.key and meta["val_accuracy"] == first.val_accuracy

    again = ensure_base_checkpoint(SMALL_TASK, FEW_STEPS, tmp_path)
    assert again.cached and again.checkpoint_dir == first.checkpoint_dir
    assert (again.val_accuracy, again.train_wall_s, again.final_loss) == (
        first.val_accuracy,
        first.train_wall_s,
        first.final_loss,
    )

    shutil.rmtree(first.checkpoint_dir)
    rebuilt = ensure_base_checkpoint(SMALL_TASK, FEW_STEPS, tmp_path)
    assert not rebuilt.cached and rebuilt.key == first.key


def test_saved_checkpoint_reloads_to_the_measured_accuracy(tmp_path: Path) -> None:
    result = ensure_base_checkpoint(SMALL_TASK, WarmupConfig(steps=4, examples_per_step=16, torch_threads=1), tmp_path)
    model, tok = load_pretrained(result.checkpoint_dir), load_tokenizer(result.checkpoint_dir)
    ev = evaluate_greedy(
        model,
        Renderer(tok),
        build_splits(SMALL_TASK).validation,
        toy_reward_fn(SMALL_TASK),
        max_new_tokens=SMALL_TASK.max_answer_chars + 1,
    )
    assert ev.accuracy == result.val_accuracy
    assert ev.accuracy_by_source == result.val_accuracy_by_source


@pytest.mark.slow
def test_default_warmup_leaves_room_for_rl(tmp_path: Path) -> None:
    """The default warm-up reaches a greedy validation accuracy in the band RL can improve on."""
    result = ensure_base_checkpoint(ToyTaskConfig(), WarmupConfig(torch_threads=1), tmp_path)
    assert 0.05 <= result.val_accuracy <= 0.6, result


def test_a_foreign_directory_at_the_cache_path_is_refused_before_training(tmp_path: Path) -> None:
    tok = build_task_tokenizer(SMALL_TASK.build())
    steps = FEW_STEPS.resolved("tiny")  # the key is computed from the resolved config
    key = warmup_key(SMALL_TASK, steps, build_base_model_config(SMALL_TASK, steps, tok), tok)
    (tmp_path / f"warmup-{key}").mkdir()
    with pytest.raises(ValueError, match=f"exists without {METADATA_FILE}"):
        ensure_base_checkpoint(SMALL_TASK, FEW_STEPS, tmp_path)


def test_every_task_kind_warms_up_and_scores_its_base(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    rows = [{"data_source": "d", "prompt": f"{i}*2=", "ground_truth": 2 * i} for i in range(40)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = {
        "toy": SMALL_TASK.build(),
        "calculator": CalculatorTaskConfig(train_size=200, val_size=6, max_digits=1).build(),
        "dataset": DatasetTaskConfig(train_file=str(data), val_size=6).build(),
        "scratchpad": ScratchpadTaskConfig(train_size=200, val_size=6, sort=SortTraceSource(max_len=5)).build(),
    }
    for kind, task in tasks.items():
        result = ensure_base_checkpoint(task, FEW_STEPS, tmp_path / kind)
        assert not result.cached and result.final_loss is not None and 0.0 <= result.val_accuracy <= 1.0
        model, tok = load_pretrained(result.checkpoint_dir), load_tokenizer(result.checkpoint_dir)
        assert tok.vocab() == build_task_tokenizer(task).vocab() and tok.vocab_size == model.config.vocab_size
        ev = evaluate_greedy(
            model,
            Renderer(tok),
            task.splits.validation,
            task.reward_fn,
            max_new_tokens=task.max_answer_chars + 1,
            tool=task.tool,
        )
        assert ev.accuracy == result.val_accuracy, kind


def test_a_task_config_and_the_task_it_builds_share_one_cached_base(tmp_path: Path) -> None:
    built = ensure_base_checkpoint(SMALL_TASK.build(), FEW_STEPS, tmp_path)
    from_config = ensure_base_checkpoint(SMALL_TASK, FEW_STEPS, tmp_path)
    assert from_config.cached and from_config.checkpoint_dir == built.checkpoint_dir


def test_something_that_is_no_task_is_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="expected a Task or a task config whose build\\(\\) gives one, got dict"):
        ensure_base_checkpoint({"kind": "toy"}, FEW_STEPS, tmp_path)  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_calculator_base_of_the_apps_warmup_length_leaves_room_for_rl(tmp_path: Path) -> None:
    """The default calculator task after the apps' 100-step warm-up: the tool loop works (clearly above 0) and
    RL has room (at most 60%)."""
    result = ensure_base_checkpoint(CalculatorTaskConfig(), WarmupConfig(steps=100, torch_threads=1), tmp_path)
    assert 0.05 <= result.val_accuracy <= 0.6, result


def _base_weights(cfg: WarmupConfig, cache: Path) -> dict[str, torch.Tensor]:
    model = load_pretrained(ensure_base_checkpoint(SMALL_TASK, cfg, cache).checkpoint_dir)
    return {name: p.detach() for name, p in model.state_dict().items()}


def test_a_float64_warmup_reaches_one_float32_base_whichever_kernel_sums_the_gradients(tmp_path: Path) -> None:
    """The padded and looped expert kernels sum in different orders, as two CPUs' kernels do. Training grows
    that rounding step by step: in float32 the two bases already differ by ~1e-5 after 6 steps (by up to 0.08
    after the default 150); in float64 they round to the same float32 weights (an ulp here and there)."""
    spread = {}
    for dtype in ("float64", "float32"):
        configs = [
            WarmupConfig(
                steps=6, examples_per_step=16, lr_warmup_steps=0, torch_threads=1, dtype=dtype, experts_kernel=kernel
            )
            for kernel in ("padded", "looped")
        ]
        padded, looped = (_base_weights(c, tmp_path / dtype / c.experts_kernel) for c in configs)
        assert all(w.dtype == torch.float32 for w in padded.values())  # saved as float32 either way
        spread[dtype] = max(float((padded[k] - looped[k]).abs().max()) for k in padded)
    assert spread["float64"] < 1e-7, spread  # at most an ulp of a weight near 1 (0.0 when measured)
    assert spread["float32"] > 1e-6, spread  # 1.5e-5 when measured


@pytest.mark.slow
def test_a_production_vocabulary_preset_warms_up_in_float32_with_the_qwen_layout_tokenizer(tmp_path: Path) -> None:
    from moe_models import load_config, load_tokenizer

    warmup = WarmupConfig(steps=1, examples_per_step=2)
    assert warmup.resolved("small").dtype == "float32" and warmup.resolved("tiny").dtype == "float64"
    assert WarmupConfig().resolved("small").examples_per_step == 16
    result = ensure_base_checkpoint(SMALL_TASK, warmup, tmp_path, ModelConfig(preset="small"))
    config, tokenizer = load_config(result.checkpoint_dir), load_tokenizer(result.checkpoint_dir)
    assert (config.vocab_size, tokenizer.vocab_size) == (151_936, 151_669)
    assert tokenizer.eos_token == "<|im_end|>" and result.final_loss is not None
