"""The pieces of the async app that need no Ray: command line, config checks, staleness metrics, group requests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_ppo.cli import parse

if TYPE_CHECKING:
    from async_pipeline.rollouter import RollouterSpec

APP = Path(__file__).resolve().parents[2] / "apps" / "async_ppo"


def test_help_lists_the_pipeline_sections_without_importing_torch_or_ray() -> None:
    probe = "import sys, async_ppo.cli; assert not {'torch', 'ray'} & set(sys.modules), 'heavy import before parsing'"
    subprocess.run([sys.executable, "-c", probe], check=True)
    out = subprocess.run([sys.executable, str(APP), "--help"], check=True, capture_output=True, text=True).stdout
    for flag in ("--pipeline.max_staleness", "--pipeline.pause_mode", "--ray.address", "--rollout.engine", "--resume"):
        assert flag in out


def test_a_new_run_without_run_dir_is_given_its_directory_when_it_starts() -> None:
    cfg, resume = parse([])
    assert not resume and cfg.run.dir == ""  # allocated (unique, under runs/async_ppo) by the run, not by parsing


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--pipeline.max_staleness", "-1"], "max_staleness >= 0"),
        (["--pipeline.sync_every", "3", "--pipeline.max_staleness", "1"], "sync_every 3 > max_staleness"),
        (["--pipeline.pause_mode", "wait"], "pause_mode"),
        (["--ray.num_rollouters", "0"], "num_rollouters >= 1"),
        (["--algorithm.kind", "decoupled", "--algorithm.old_log_probs", "rollout"], "not a key of algorithm.kind"),
        (["--rollout.engine", "tgi"], "rollout.engine.kind: expected one of"),
    ],
)
def test_bad_settings_are_rejected_with_got_and_expected(tmp_path: Path, flags: list[str], match: str) -> None:
    with pytest.raises((ValueError, SystemExit), match=match):
        parse([*flags, "--run.dir", str(tmp_path)])


def test_rollout_compile_decode_flag_reaches_every_rollouters_engine_spec(
    tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    from async_pipeline.specs import rollouter_specs
    from trainers.recipe.setup import prepare_run

    def specs_of(cfg: AsyncConfig) -> list[RollouterSpec]:
        return rollouter_specs(prepare_run(cfg), cfg.pipeline, cfg.ray, cfg.faults)

    flags = ("--rollout.engine.compile_decode", "true", "--ray.num_rollouters", "2")
    specs = specs_of(tiny_config(tmp_path / "run", *flags))
    assert [s.rollout.engine.compile_decode for s in specs] == [True, True]
    assert [s.site.index for s in specs] == [0, 1]
    assert not specs_of(tiny_config(tmp_path / "default"))[0].rollout.engine.compile_decode


def test_the_precision_probe_is_refused_in_async_ppo(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="apps/sync_ppo"):
        parse(["--debug.precision_steps", "1", "--run.dir", str(tmp_path / "b")])
