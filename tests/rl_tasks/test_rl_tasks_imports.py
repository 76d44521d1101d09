"""The package stays light: importing it, checking a model preset and building any task do not import torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_importing_rl_tasks_and_checking_a_preset_does_not_import_torch() -> None:
    code = (
        "import sys, rl_tasks, rl_tasks.model_config\n"
        "rl_tasks.model_config.ModelConfig(family='deepseek_v3', preset='small')\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"


def test_building_every_task_kind_does_not_import_torch(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"data_source": "d", "prompt": "q{i}", "ground_truth": {i}}}\n' for i in range(4)))
    code = (
        "import sys\n"
        "from rl_tasks import CalculatorTaskConfig, DatasetTaskConfig, ToyTaskConfig\n"
        "ToyTaskConfig(train_size=20, val_size=2).build()\n"
        "CalculatorTaskConfig(train_size=20, val_size=2).build()\n"
        f"DatasetTaskConfig(train_file={str(data)!r}, val_size=1).build()\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
