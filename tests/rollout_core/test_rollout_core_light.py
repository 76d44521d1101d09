"""rollout_core is light: importing it (and its testing helpers) never imports torch."""

import subprocess
import sys


def test_import_does_not_import_torch():
    code = (
        "import sys, rollout_core, rollout_core.testing, rollout_core.testing.engine_contract;"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
