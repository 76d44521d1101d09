"""Why the VeOmni backend trains Qwen3-MoE only, pinned against VeOmni 0.1.12 itself: VeOmni has no Qwen2-MoE and
no Mixtral model, and its DeepSeek-V3 and GPT-OSS models (which it builds on the CPU from our checkpoints, matching
our forward) never call the router-replay hook. Each check fails when VeOmni changes this (a family may then become
trainable: docs/veomni.md, "Model families"). Needs the `veomni` group.

The VeOmni checks run in a child process (`python thisfile.py port checkpoints_dir`): VeOmni's parallel state is a
process-wide singleton that must not leak into other tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from moe_models import MoEConfig, MoEForCausalLM, save_pretrained
from trainers.backend.veomni.support import VEOMNI_UNSERVED
from trainers_fixtures import PAD, VOCAB

pytestmark = [
    pytest.mark.veomni,
    pytest.mark.skipif(find_spec("veomni") is None, reason="no VeOmni here: run bash scripts/test_veomni.sh"),
]

UNREGISTERED = ("qwen2_moe", "mixtral")  # no model in VeOmni's registry
HOOKLESS = ("deepseek_v3", "gpt_oss")  # VeOmni's model, without the replay hook


def family_model(family: str) -> MoEForCausalLM:
    torch.manual_seed(0)
    return MoEForCausalLM(MoEConfig.preset("tiny", vocab_size=VOCAB, model_type=family, pad_token_id=PAD))


def _checkpoints(tmp_path: Path) -> Path:
    for family in (*UNREGISTERED, *HOOKLESS):
        save_pretrained(family_model(family), tmp_path / family)
    return tmp_path


@pytest.fixture(scope="module")
def veomni_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    root = _checkpoints(tmp_path_factory.mktemp("families"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = os.environ | {"VEOMNI_VERBOSITY": "ERROR"}
    out = subprocess.run(
        [sys.executable, __file__, str(port), str(root)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("family", UNREGISTERED)
def test_veomni_has_no_model_of_the_family(veomni_facts: dict[str, dict[str, object]], family: str) -> None:
    got = veomni_facts[family]["build_error"]
    assert got == f"ValueError: Unknown Modeling name: {family}. No Modeling registered for this source.", (
        f"VeOmni now builds {family}: check its replay hook and add the family (docs/veomni.md)"
    )


@pytest.mark.parametrize("family", HOOKLESS)
def test_veomni_builds_the_family_but_its_moe_blocks_never_call_the_replay_hook(
    veomni_facts: dict[str, dict[str, object]], family: str
) -> None:
    got = veomni_facts[family]
    assert got["logits_max_diff"] < 1e-5  # the model is there and is ours to float rounding
    assert got["moe_layers"] == family_model(family).config.num_moe_layers
    assert got["hook_calls"] == 0, f"VeOmni's {family} now calls the replay hook: the family may be trainable"
    assert str(got["validate_error"]).startswith(f"router replay is not wired for model_type='{family}'")


@pytest.mark.parametrize("family", [*UNREGISTERED, *HOOKLESS])
def test_the_veomni_backend_refuses_a_checkpoint_of_the_family_with_the_reason(tmp_path: Path, family: str) -> None:
    from trainers.backend.veomni.backend import VeOmniBackend

    save_pretrained(family_model(family), tmp_path)
    with pytest.raises(ValueError, match="VeOmniBackend") as refused:
        VeOmniBackend(str(tmp_path))
    assert VEOMNI_UNSERVED[family] in str(refused.value)


# ---------------------------------------------------------------------- the child process
class _CountingReplay:
    """A router-replay manager that only counts the MoE blocks consulting it (and keeps their native ids)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_router_forward(self, module: object, scores: torch.Tensor, top_indices: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return top_indices


def _hookless(family: str, ckpt: Path) -> dict[str, object]:
    from trainers.backend.veomni.compat import build_model
    from veomni.utils.moe_router_replay import set_active_replay, validate_model_for_replay

    model = build_model(str(ckpt), 1).eval()
    ids = torch.randint(1, VOCAB, (2, 21), generator=torch.Generator().manual_seed(0))
    counter = _CountingReplay()
    set_active_replay(counter)
    try:
        with torch.no_grad():
            got = model(input_ids=ids, use_cache=False).logits
    finally:
        set_active_replay(None)
    with torch.no_grad():
        want = family_model(family)(ids).logits
    try:
        validate_model_for_replay(model)
        validate_error = ""
    except RuntimeError as exc:
        validate_error = str(exc)
    return {
        "logits_max_diff": float((got - want).abs().max()),
        "moe_layers": sum(hasattr(layer.mlp, "experts") for layer in model.model.layers),
        "hook_calls": counter.calls,
        "validate_error": validate_error,
    }


def _facts(port: int, root: Path) -> dict[str, dict[str, object]]:
    import torch.distributed as dist
    from trainers.backend.veomni.compat import build_model, init_parallel

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    init_parallel(1, "cpu")
    facts: dict[str, dict[str, object]] = {}
    for family in UNREGISTERED:
        try:
            build_model(str(root / family), 1)
            facts[family] = {"build_error": ""}
        except Exception as exc:  # recorded, not judged: the test compares the exact error
            facts[family] = {"build_error": f"{type(exc).__name__}: {exc}"}
    for family in HOOKLESS:
        facts[family] = _hookless(family, root / family)
    dist.destroy_process_group()
    return facts


if __name__ == "__main__":
    print(json.dumps(_facts(int(sys.argv[1]), Path(sys.argv[2]))))
