"""Puts this folder's uniquely named helper module (`trainers_fixtures`) on the import path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
