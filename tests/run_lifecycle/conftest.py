"""Makes the example configs next to this file importable (`run_config_examples`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file
