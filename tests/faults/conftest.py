"""The fault suite (marker `faults`, deselected from the default run): `uv run pytest -m 'faults and not vllm'
tests/faults`; its vLLM test (markers `faults` and `vllm`) runs with `uv run pytest -m vllm tests/faults`.

Each test reports to the session's `FaultTally` (schedules, faults injected, invariant checks); the session ends
with one summary line of the totals and the number of violations.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before ray is imported: workers reuse this venv

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the uniquely named helper modules next to this file

from faults_tally import TALLY, FaultTally

torch.set_num_threads(1)


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[FaultTally]:
    """The session's tally; the test's own counts and notes become its report line when it ends."""
    before = (TALLY.schedules, TALLY.faults, TALLY.checks)
    TALLY.notes = []
    yield TALLY
    s, f, c = (now - then for now, then in zip((TALLY.schedules, TALLY.faults, TALLY.checks), before, strict=True))
    TALLY.tests.append(f"{request.node.name}: {s} schedules, {f} faults, {c} checks. " + " ".join(TALLY.notes))


@pytest.fixture(scope="session")
def warmup_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults-warmup-cache")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TALLY.tests:
        terminalreporter.section("fault suite")
        for line in TALLY.tests:
            terminalreporter.write_line(line)
        terminalreporter.write_line(TALLY.line())
