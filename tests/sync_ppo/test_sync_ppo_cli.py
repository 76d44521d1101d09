"""The command line: `--help` is fast and torch-free; settings resolve defaults < TOML < flags; --resume pins the
run directory and reads its saved config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from run_lifecycle import to_toml
from sync_ppo.cli import parse

APP = Path(__file__).resolve().parents[2] / "apps" / "sync_ppo"


WORKSPACE = APP.parents[1]
# `--help` runs the app's __main__ in a fresh interpreter and reports the top-level packages it imported that are
# neither the standard library nor interpreter internals.
_HELP_IMPORTS = """
import contextlib, io, runpy, sys
sys.argv = [sys.argv[1], "--help"]
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    runpy.run_path(sys.argv[0], run_name="__main__")
tops = {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - set(sys.builtin_module_names)
print(" ".join(sorted(t for t in tops if not t.startswith("_") and t != "cython_runtime")))
"""


def test_help_imports_only_the_workspace_and_numpy() -> None:
    """`--help` stays cheap by importing nothing heavy: the workspace's config modules and numpy (rl_tasks' config
    modules use it), never torch (~12 numpy imports of CPU), transformers, ray, an engine or a plotting library.
    Checked on the set of imported packages rather than on CPU time, which moved by more than its margin between
    runs on one machine."""
    workspace = {p.name for p in WORKSPACE.glob("packages/*/src/*") if p.is_dir()} | {"sync_ppo", "__main__"}
    out = subprocess.run(
        [sys.executable, "-c", _HELP_IMPORTS, str(APP)], check=True, capture_output=True, text=True
    ).stdout
    third_party = set(out.split()) - workspace
    assert third_party == {"numpy"}, f"--help imported {sorted(third_party)}, expected only numpy"


def test_help_lists_every_kind_of_each_tagged_section() -> None:
    out = subprocess.run([sys.executable, str(APP), "--help"], check=True, capture_output=True, text=True).stdout
    for title in (
        "task (kind: toy | scratchpad | dataset | calculator)",
        "rollout.engine (kind: native | vllm | sglang)",
        "algorithm (kind: ppo | gspo | decoupled | opd)",
        "backend (kind: torch | veomni | megatron)",
    ):
        assert title in out, title
    assert "--algorithm.is_cap" in out and "algorithm.kind: decoupled" in out  # a key of one kind says so


def test_flags_override_toml_which_overrides_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("[rollout]\nprompts_per_step = 5\nsamples_per_prompt = 3\n[optim]\nlr = 0.5\n")
    cfg, resume = parse(["--config", str(toml), "--rollout.samples_per_prompt", "7", "--run.dir", str(tmp_path / "r")])
    assert not resume
    assert (cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.optim.lr) == (5, 7, 0.5)
    assert cfg.validation.every_steps == 10  # untouched default


def test_a_new_run_without_run_dir_is_given_its_directory_when_it_starts() -> None:
    cfg, resume = parse([])
    assert not resume and cfg.run.dir == ""  # allocated (unique, under runs/sync_ppo) by the run, not by parsing


def test_resume_reads_the_saved_config_and_lets_flags_extend_it(tmp_path: Path) -> None:
    saved, _ = parse(["--run.dir", str(tmp_path), "--rollout.prompts_per_step", "3", "--run.steps", "2"])
    (tmp_path / "config.toml").write_text(to_toml(saved))
    cfg, resume = parse(["--resume", "--run.dir", str(tmp_path), "--run.steps", "5"])
    assert resume and cfg.run.dir == str(tmp_path)
    assert (cfg.rollout.prompts_per_step, cfg.run.steps) == (3, 5)


def _saved_run(tmp_path: Path, *flags: str, checkpoint: int | None = None) -> Path:
    saved, _ = parse(["--run.dir", str(tmp_path), "--run.steps", "12", *flags])
    (tmp_path / "config.toml").write_text(to_toml(saved))
    if checkpoint is not None:
        (tmp_path / "checkpoints" / str(checkpoint)).mkdir(parents=True)
        (tmp_path / "checkpoints" / str(checkpoint) / "COMPLETE").write_text("")
    return tmp_path


@pytest.mark.parametrize(
    "flags",
    [
        ["--rollout.prompts_per_step", "16"],
        ["--run.seed", "3"],
        ["--task.sort_weight", "0.5"],
        ["--rollout.samples_per_prompt", "4"],
        ["--warmup.steps", "5"],
    ],
)
def test_resume_refuses_a_change_of_the_settings_that_decide_the_data(tmp_path: Path, flags: list[str]) -> None:
    run = _saved_run(tmp_path, checkpoint=7)
    with pytest.raises(ValueError, match=re.escape(flags[0][2:]) + r": .* -> "):
        parse(["--resume", "--run.dir", str(run), *flags])
    _, resume = parse(["--resume", "--run.dir", str(run), "--allow-changed-data", *flags])
    assert resume


def test_resume_accepts_changes_that_keep_the_data_and_refuses_a_run_already_past_its_steps(tmp_path: Path) -> None:
    run = _saved_run(tmp_path, checkpoint=12)
    with pytest.raises(ValueError, match=r"expected run\.steps > 12"):
        parse(["--resume", "--run.dir", str(run), "--run.steps", "5"])
    cfg, _ = parse(["--resume", "--run.dir", str(run), "--run.steps", "20", "--optim.lr", "3e-4"])
    assert (cfg.run.steps, cfg.optim.lr) == (20, 3e-4)


def test_a_new_run_refuses_a_directory_that_holds_a_run(tmp_path: Path) -> None:
    run = _saved_run(tmp_path)
    with pytest.raises(ValueError, match="pass --resume"):
        parse(["--run.dir", str(run)])


def test_bad_values_raise_with_got_and_expected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="samples_per_prompt"):
        parse(["--validation.samples_per_prompt", "1", "--run.dir", str(tmp_path)])


@pytest.mark.parametrize(
    ("flag", "value", "key"),
    [
        ("--algorithm.agg_mode", "foo", "algorithm.agg_mode"),
        ("--optim.lr", "-1", "optim"),
        ("--train.micro_batch_tokens", "0", "train.micro_batch_tokens"),
        ("--train.mini_batches_per_step", "0", "train.mini_batches_per_step"),
        ("--train.ppo_epochs", "0", "train.ppo_epochs"),
        ("--model.preset", "huge", "model.preset"),
        ("--model.family", "llama", "model.family"),
        ("--model.path", "no-such-dir", "model.path"),
        ("--algorithm.clip_low", "5", "clip_low"),
    ],
)
def test_a_bad_setting_fails_at_parse_time_without_touching_the_disk(
    tmp_path: Path, flag: str, value: str, key: str
) -> None:
    done = subprocess.run([sys.executable, str(APP), flag, value], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and key in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory (a plain --resume would pick it up and fail)
