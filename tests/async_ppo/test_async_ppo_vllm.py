"""The async PPO app with a real vLLM CPU server as its rollout engine (marker `vllm`).

A few steps of `async_pipeline.async_ppo.pipeline.train` with max_staleness 1; everything is read back from the run
directory: the rollout dumps of the groups the trainer took (per-token versions, routing rows), the metrics (mismatch of
vLLM's log-probs against the trainer's, with and without router replay) and the server's log (its pid, which
must be gone once the run returned).
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before ray is imported: workers reuse this venv

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.pipeline import train
from async_pipeline.specs import rollouter_specs
from async_ppo.cli import parse
from engine_adapters.vllm import default_python
from engine_adapters.vllm.rollout_engine import SERVER_GUARD, VLLM_LOG_NAME, VLLMRolloutEngine
from moe_models import load_pretrained
from rollout_core import SamplingParams, StopReason, Trajectory, TrajectoryStatus, generate_with_resume
from run_lifecycle import read_metrics
from trainers.dumps import DumpRecord, read_dump
from trainers.recipe.setup import prepare_run

VLLM_PYTHON = default_python()
STEPS = 3
MAX_STALENESS = 1
PROMPTS, SAMPLES = 4, 4

requires_vllm_env = pytest.mark.skipif(
    not VLLM_PYTHON.exists(), reason=f"vLLM environment absent ({VLLM_PYTHON}): run scripts/setup_vllm_env.sh"
)
# a server stand-in: starts a child (as vLLM its engine core) in its process group, writes both pids, sleeps
SERVER = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(120)\n"
)
# a rollouter stand-in: starts the server (through the guard when argv[1] is its path) in a new session, sleeps
ROLLOUTER = (
    "import os, subprocess, sys, time\n"
    "server = [sys.executable, '-c', sys.argv[2], sys.argv[3]]\n"
    "guard = [sys.executable, '-I', sys.argv[1], str(os.getpid())] if sys.argv[1] else []\n"
    "subprocess.Popen([*guard, *server], start_new_session=True)\n"
    "time.sleep(120)\n"
)

TINY = [
    "--task.train_size", "400", "--task.val_size", "12",
    "--warmup.steps", "8", "--warmup.examples_per_step", "16",
    "--rollout.engine", "vllm", "--rollout.prompts_per_step", str(PROMPTS),
    "--rollout.samples_per_prompt", str(SAMPLES), "--rollout.engine.max_num_seqs", "64",
    "--validation.every_steps", "100", "--validation.max_prompts", "8",
    "--pipeline.max_staleness", str(MAX_STALENESS),
    "--run.steps", str(STEPS), "--run.progress", "false", "--run.plots", "false", "--run.checkpoint_every", "0",
    "--ray.stall_timeout_s", "240", "--ray.call_timeout_s", "240",
]  # fmt: skip


@pytest.fixture(scope="module")
def warmup_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warmup-cache")


def _config(run_dir: Path, warmup_cache: Path, pause_mode: str, family: str = "qwen3_moe") -> AsyncConfig:
    ray_temp = tempfile.mkdtemp(prefix="apv_", dir="/tmp")  # unix socket paths under it must stay < 107 chars
    cfg, resume = parse([*TINY, "--run.dir", str(run_dir), "--run.warmup_cache", str(warmup_cache),
                         "--ray.temp_dir", ray_temp, "--pipeline.pause_mode", pause_mode,
                         "--model.family", family])  # fmt: skip
    assert not resume
    return cfg


def _server_pids(log: Path) -> set[int]:
    """Pids of the API server and engine core, as vLLM prefixes its log lines: `(APIServer pid=123) ...`."""
    pids = set()
    for line in log.read_text(errors="replace").splitlines():
        for tag in ("(APIServer pid=", "(EngineCore pid="):
            if line.startswith(tag):
                pids.add(int(line[len(tag) :].split(")", 1)[0]))
    return pids


def _alive(pid: int) -> bool:
    """Running or sleeping (a zombie waiting for its reaper is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _check_record(r: DumpRecord, step: int) -> None:
    lo, hi = step - 1 - MAX_STALENESS, step - 1
    assert len(r.token_versions) == len(r.response_ids) > 0, r.uid
    assert all(max(lo, 0) <= v <= hi for v in r.token_versions), (r.uid, step, r.token_versions)
    n = len(r.prompt_ids) + len(r.response_ids)
    assert r.routing is not None, r.uid
    assert len(r.routing) == n - 1 and r.routing.missing(n) == [], (r.uid, len(r.routing), n)
    rows = r.routing.to_numpy()
    assert rows.shape[0] == n - 1 and (rows >= 0).all(), r.uid
    # each row was produced by a forward pass that sampled one of this response's tokens
    versions = r.routing.versions
    assert min(r.token_versions) <= versions.min() and versions.max() <= max(r.token_versions), r.uid


@pytest.mark.vllm
@requires_vllm_env
@pytest.mark.parametrize("family", ["qwen3_moe", "gpt_oss"])
def test_vllm_rollouts_reach_the_trainer_with_token_versions_and_full_routing(
    tmp_path: Path, warmup_cache: Path, family: str
) -> None:
    """The app's default pause mode (keep), on the default family and on GPT-OSS (sinks, alternating sliding
    windows, biased router and experts: the family furthest from it). Pause `abort` is pinned below on the engine
    alone, where the push is timed to land mid-generation; in a short app run it rarely does."""
    run_dir = tmp_path / "run"
    cfg = _config(run_dir, warmup_cache, "keep", family)
    try:
        summary = train(cfg)
    finally:
        shutil.rmtree(cfg.ray.temp_dir, ignore_errors=True)
    assert summary.steps == STEPS
    for step in range(1, STEPS + 1):
        records = read_dump(run_dir / "rollouts" / f"{step}.jsonl")
        ok = [r for r in records if r.status is TrajectoryStatus.OK]
        assert len(records) == PROMPTS * SAMPLES and len(ok) >= PROMPTS * SAMPLES // 2, (step, len(ok))
        for r in ok:
            _check_record(r, step)
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "mismatch/replay/tokens" in r]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["staleness/sample_max"] <= MAX_STALENESS for r in rows)
    measured = [r for r in rows if r["mismatch/replay/tokens"] > 0]
    assert measured, "no step measured the vLLM-vs-trainer log-prob mismatch"
    for r in measured:  # float32 on both sides (seen: ~1e-7 to 3e-7); wrong routing rows would cost far more
        for kind in ("replay", "no_replay"):
            if r[f"mismatch/{kind}/tokens"] > 0:
                value = r[f"mismatch/{kind}/abs_diff_mean"]
                assert np.isfinite(value) and value < 1e-5, (r["step"], kind, value)
    log = run_dir / "engine" / "rollouter-0" / VLLM_LOG_NAME
    pids = _server_pids(log)
    assert len(pids) == 2, f"expected the API server's and engine core's pids in {log}, got {pids}"
    assert not [p for p in pids if _alive(p)], f"vLLM processes {pids} outlived the run"


# Every response runs to the length limit (`ignore_eos`): ~300 decode steps of 64 sequences, seconds of
# generation after the first token, against a push that needs ~10 ms to write the weights and one request to pause.
# Left to stop at EOS, the weakly warmed-up model ended its answers after 1-43 tokens (0.57 s after the first
# token here), and on another CPU all of them before the pause landed: the test then saw no response in flight (a
# CI failure, not a bug in the push). The 64 resumed calls then re-prefill up to 320 tokens each at once, which
# also exercises the CPU server's no-chunked-prefill setting (`VLLMServerConfig.command`).
ENGINE_MAX_LEN = 320
ENGINE_PROMPTS = 64  # = engine_slots: all run at once, so every one is in flight when the push lands


async def _generate_across_an_abort_push(engine: VLLMRolloutEngine, prompts: list[list[int]]) -> list[Trajectory]:
    """Starts every prompt, pushes version 1 with pause `abort` as soon as one request has a token."""
    base = load_pretrained(engine.site.checkpoint_dir)
    state = {k: v.detach() * 1.01 for k, v in base.state_dict().items()}  # any weights other than v0
    params = [
        SamplingParams(max_new_tokens=ENGINE_MAX_LEN - len(p), seed=i, ignore_eos=True) for i, p in enumerate(prompts)
    ]
    tasks = [asyncio.create_task(generate_with_resume(engine, f"r{i}", p, params[i])) for i, p in enumerate(prompts)]
    deadline = time.monotonic() + 120
    while not any((engine.progress(f"r{i}") or 0) >= 1 for i in range(len(prompts))):
        assert time.monotonic() < deadline and not any(t.done() for t in tasks), "no request produced a token"
        await asyncio.sleep(0.002)
    await engine.push(state, 1, "abort")
    return list(await asyncio.gather(*tasks))


def _check_versions_across_the_push(t: Trajectory, prompt_len: int) -> None:
    """Tokens: v0 then v1. Rows: those of the first (aborted) call keep v0, the resumed call's are v1."""
    assert t.token_versions == sorted(t.token_versions) and set(t.token_versions) <= {0, 1}, t.token_versions
    n = prompt_len + len(t.response_ids)
    assert t.routing is not None and len(t.routing) == n - 1 and t.routing.missing(n) == []
    v0_tokens = t.token_versions.count(0)
    split = prompt_len + v0_tokens - 1 if v0_tokens else 0  # rows of the forward passes that sampled v0 tokens
    versions = t.routing.versions
    assert (versions[:split] == 0).all() and (versions[split:] == 1).all(), (split, versions.tolist())


@pytest.mark.vllm
@requires_vllm_env
def test_vllm_rollout_engine_push_with_abort_resumes_responses_with_versions_and_full_routing(
    tmp_path: Path, warmup_cache: Path
) -> None:
    """The rollouter's engine alone (no Ray): launch, a push that aborts the in-flight responses, resume, close."""
    cfg = _config(tmp_path / "run", warmup_cache, "abort")
    shutil.rmtree(cfg.ray.temp_dir)  # no Ray here
    setup = prepare_run(cfg)
    spec = rollouter_specs(setup, cfg.pipeline, cfg.ray, cfg.faults)[0]
    site = replace(spec.site, max_len=ENGINE_MAX_LEN)
    examples = setup.task.splits.train[:ENGINE_PROMPTS]
    prompts = [setup.renderer.prompt_ids(ex) for ex in examples]

    async def scenario() -> tuple[list[Trajectory], int]:
        engine = await spec.rollout.engine.build(site)
        assert isinstance(engine, VLLMRolloutEngine)
        try:
            trajectories = await _generate_across_an_abort_push(engine, prompts)
            return trajectories, engine.weight_version
        finally:
            await engine.close()

    trajectories, served = asyncio.run(scenario())
    assert served == 1
    work = Path(site.work_dir)
    assert sorted(p.name for p in work.iterdir()) == [VLLM_LOG_NAME]  # the pushed folder was removed
    for t, p in zip(trajectories, prompts, strict=True):
        assert t.status is TrajectoryStatus.OK and t.stop_reason is StopReason.LENGTH
        assert len(p) + len(t.response_ids) == ENGINE_MAX_LEN
        _check_versions_across_the_push(t, len(p))
    in_flight = [t.num_resumes > 0 and 0 in t.token_versions and 1 in t.token_versions for t in trajectories]
    assert any(in_flight), "no response had tokens under both versions"
    assert all(t.num_resumes > 0 for t in trajectories), "a response was not in flight when the abort push landed"
    pids = _server_pids(work / VLLM_LOG_NAME)
    assert len(pids) == 2 and not [p for p in pids if _alive(p)], f"vLLM processes {pids} outlived close()"


@dataclass
class _Tree:
    """A rollouter stand-in and the server tree it started (server and the server's child)."""

    rollouter: subprocess.Popen[bytes]
    server: int
    child: int

    def kill_all(self) -> None:
        self.rollouter.kill()
        self.rollouter.wait()
        for pid in (self.server, self.child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _start_tree(tmp_path: Path, guarded: bool) -> _Tree:
    pid_file = tmp_path / f"server-guarded-{guarded}.pids"
    guard = str(SERVER_GUARD) if guarded else ""
    rollouter = subprocess.Popen([sys.executable, "-c", ROLLOUTER, guard, SERVER, str(pid_file)])
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        if time.monotonic() > deadline:
            rollouter.kill()
            raise AssertionError(f"the server stand-in did not start within 30 s (no {pid_file})")
        time.sleep(0.05)
    server, child = (int(x) for x in pid_file.read_text().split())
    return _Tree(rollouter, server, child)


def _wait_dead(pids: tuple[int, ...], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.parametrize("killed", ["rollouter", "server"])
def test_server_guard_ends_the_server_tree_when_the_rollouter_or_the_server_is_killed(
    tmp_path: Path, killed: str
) -> None:
    """`rollouter`: the actor's process dies (a crash); `server`: Ray SIGKILLs the dying actor's direct children.
    Either way the server's own child (vLLM's engine core), which ignores its parent's death, must end too."""
    guarded, control = _start_tree(tmp_path, guarded=True), _start_tree(tmp_path, guarded=False)
    try:
        for tree in (guarded, control):
            if killed == "rollouter":
                tree.rollouter.kill()
                tree.rollouter.wait()
            else:
                os.kill(tree.server, signal.SIGKILL)
        assert _wait_dead((guarded.server, guarded.child), 10.0), "the guarded server tree outlived its rollouter"
        assert _alive(control.child), "control: without the guard the child survives (else this pins nothing)"
    finally:
        guarded.kill_all()
        control.kill_all()


def test_server_guard_refuses_to_start_the_server_when_its_parent_is_not_the_expected_one() -> None:
    wrong_parent = os.getpid() + 1_000_000  # no such pid: the guard's parent is this test process
    done = subprocess.run(
        [sys.executable, "-I", str(SERVER_GUARD), str(wrong_parent), sys.executable, "-c", "print('server ran')"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "server ran" not in done.stdout
    assert "exited before the server started" in done.stderr
