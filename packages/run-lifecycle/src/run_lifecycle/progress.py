"""A one-line live view of a run: step, and the metrics a user watches (reward, accuracy, tokens/s, ...)."""

from __future__ import annotations

import sys
from collections.abc import Mapping


class Progress:
    """A tqdm bar over steps whose postfix shows `fields` (display name -> metric name), when present."""

    def __init__(self, total: int, fields: Mapping[str, str], *, initial: int = 0, disable: bool | None = None):
        from tqdm import tqdm  # here, not at import: every app's `--help` imports this module, and it stays fast

        self.fields = dict(fields)
        self._last: dict[str, str] = {}
        self._bar = tqdm(
            total=total,
            initial=initial,
            unit="step",
            dynamic_ncols=True,
            file=sys.stderr,
            disable=disable if disable is not None else None,
        )

    def update(self, step: int, metrics: Mapping[str, object]) -> None:
        for label, name in self.fields.items():
            value = metrics.get(name)
            if isinstance(value, int | float):
                self._last[label] = f"{value:.3g}" if isinstance(value, float) else str(value)
        self._bar.set_postfix_str("  ".join(f"{k}={v}" for k, v in self._last.items()), refresh=False)
        self._bar.update(step - self._bar.n)

    def close(self) -> None:
        self._bar.close()
