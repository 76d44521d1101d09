"""The package stays light: importing it (warm-up module included) does not import torch."""

from __future__ import annotations

import subprocess
import sys


def test_importing_rl_tasks_and_warmup_does_not_import_torch() -> None:
    code = "import sys, rl_tasks, rl_tasks.warmup, rl_tasks.greedy_eval; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
