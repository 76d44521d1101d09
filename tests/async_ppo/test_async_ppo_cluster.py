"""apps/async_ppo on a multi-node Ray cluster (several raylets on this machine, `ray.cluster_utils.Cluster`, marker
`cluster`): each role lands on the node its custom resource names, weights reach the rollouters' nodes through the
object store, and removing a rollouter's node mid-run loses no prompt (its rollouter is replaced on a spare node
and the prompts it held run again, once).

Nodes: the head (the driver, the trainer: resource `trainer_node`), a validator node (`validate_node`) and three
rollouter nodes (`rollout_node`): the two rollouters take two of them, the third is the spare.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from async_pipeline.async_ppo.config import AsyncConfig
from async_pipeline.async_ppo.pipeline import train
from async_ppo_helpers import trained_prompt_indices
from run_lifecycle import read_metrics
from trainers.dumps import read_dump

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
STEPS, PROMPTS = 6, 4
ROLLOUT_NODES = ("rollout_0", "rollout_1", "rollout_2")
ROLES = ["--ray.num_rollouters", "2", "--ray.trainer_resource", "trainer_node", "--ray.rollouter_resource",
         "rollout_node", "--ray.validator_resource", "validate_node", "--ray.placement_strategy", "SPREAD"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, dict[str, object]]]:
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    temp = f"/tmp/apc_{os.getpid()}"
    os.makedirs(f"{temp}/ray", exist_ok=True)
    before = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = temp  # Cluster writes its address file under it (default /tmp/ray)
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"trainer_node": 1},
            "include_dashboard": False,
            "temp_dir": f"{temp}/ray",
        },
    )
    nodes = {
        "validate": c.add_node(num_cpus=1, resources={"validate_node": 1}),
        **{f"rollout_{i}": c.add_node(num_cpus=1, resources={"rollout_node": 1}) for i in range(3)},
    }
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()
        if before is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = before
        shutil.rmtree(temp, ignore_errors=True)


def _node_ids(nodes: dict[str, object]) -> dict[str, str]:
    return {name: node.node_id for name, node in nodes.items()}  # type: ignore[attr-defined]


def _wait_for_step(run: Path, step: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (run / "metrics.jsonl").exists() and any(
            r["step"] >= step and "timing/train_s" in r for r in read_metrics(run / "metrics.jsonl")
        ):
            return
        time.sleep(0.5)
    raise TimeoutError(f"no step {step} in {run} within {timeout_s} s")


def test_roles_land_on_their_nodes_and_a_removed_rollouter_node_loses_no_prompt(
    cluster: tuple[object, dict[str, object]], tmp_path: Path, tiny_config: Callable[..., AsyncConfig]
) -> None:
    import ray

    c, nodes = cluster
    ids = _node_ids(nodes)
    head = ray.get_runtime_context().get_node_id()
    run = tmp_path / "run"
    flags = ["--run.steps", str(STEPS), "--pipeline.max_staleness", "1", "--pipeline.staleness_policy", "rerun"]
    cfg = tiny_config(run, *flags, *ROLES)
    removed: dict[str, object] = {}

    def remove_a_rollouter_node() -> None:  # the app runs in the test's (main) thread
        try:
            _wait_for_step(run, 2, timeout_s=300)
            removed["placement"] = json.loads((run / "placement.json").read_text())
            rid0 = removed["placement"]["rollouters"]["0"]  # type: ignore[index]
            removed["name"] = next(name for name in ROLLOUT_NODES if ids[name] == rid0)
            c.remove_node(nodes[removed["name"]])  # type: ignore[attr-defined,index]
        except BaseException as exc:
            removed["error"] = exc

    watcher = threading.Thread(target=remove_a_rollouter_node)
    watcher.start()
    train(cfg)
    watcher.join(timeout=60)
    assert "error" not in removed and "name" in removed, removed
    first, victim = removed["placement"], str(removed["name"])
    placement = json.loads((run / "placement.json").read_text())
    assert first["trainer"] == head and first["broker"] == head and first["validator"] == ids["validate"]
    used = {first["rollouters"]["0"], first["rollouters"]["1"]}
    assert len(used) == 2 and used <= {ids[n] for n in ROLLOUT_NODES}  # SPREAD: two of the three, any two
    (spare,) = {ids[n] for n in ROLLOUT_NODES} - used
    assert placement["rollouters"]["0"] == spare  # replaced where the resource was left
    assert [m["rollouter"] for m in placement["moves"]] == [0] and placement["moves"][0]["from"] == ids[victim]
    rows = [r for r in read_metrics(run / "metrics.jsonl") if "timing/train_s" in r]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[-1]["fault/rollouter_restarts"] == 1.0
    trained = trained_prompt_indices(run, PROMPTS, range(1, STEPS + 1))
    assert len(trained) == len(set(trained)) == STEPS * PROMPTS  # every step full, no prompt twice
    assert max(r["staleness/sample_max"] for r in rows) <= 1.0
    # every rollouter is on another node than the trainer: tokens sampled with pushed weights crossed nodes
    assert (
        max(
            rec.max_version
            for step in range(2, STEPS + 1)
            for rec in read_dump(run / "rollouts" / f"{step}.jsonl")
            if rec.response_ids
        )
        >= 1
    )
