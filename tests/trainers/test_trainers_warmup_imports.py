"""The warm-up's config and the greedy evaluation's module are light: `--help` imports them, so neither imports
torch until a base is built or evaluated."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_warmup_and_greedy_eval_and_building_a_warmup_config_does_not_import_torch() -> None:
    code = (
        "import sys, trainers.warmup, engine_adapters.native.greedy_eval\n"
        "trainers.warmup.WarmupConfig()\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
