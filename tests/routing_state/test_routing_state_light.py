"""routing_state is light: importing it never imports torch."""

import subprocess
import sys


def test_import_does_not_import_torch():
    code = "import sys, routing_state; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
