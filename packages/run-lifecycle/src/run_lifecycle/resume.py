"""What `--resume` may change. A run's data (which prompts each step trains, their sampling seeds, the task, the
warm-up base) is a function of a few settings; changing one of them on resume would re-train prompts or train on
other data than the record says, so it is refused unless the user says `--allow-changed-data`. Every resume
appends what it changed to `resumes.jsonl`; `config.toml` stays the config the run started with.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from run_lifecycle import to_dict

RESUMES_FILE = "resumes.jsonl"
# keys (or key prefixes ending in ".") that decide which data a step trains on
DATA_SHAPING = (
    "run.seed",
    "task.",
    "warmup.",
    "rollout.prompts_per_step",
    "rollout.samples_per_prompt",
    "rollout.max_new_tokens",
    "rollout.temperature",
)


def flat(cfg: Any) -> dict[str, Any]:
    """The config's leaves by dotted key."""
    out: dict[str, Any] = {}

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v

    walk(to_dict(cfg), "")
    return out


def changes(saved: Any, new: Any) -> dict[str, tuple[Any, Any]]:
    """`key -> (saved value, new value)` for every leaf that differs (keys only one side has included)."""
    a, b = flat(saved), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k) and k != "run.dir"}


def data_changes(
    diff: dict[str, tuple[Any, Any]], shaping: tuple[str, ...] = DATA_SHAPING
) -> dict[str, tuple[Any, Any]]:
    """The changes of keys that decide a run's data (`shaping`: keys, or prefixes ending in ".")."""
    return {k: v for k, v in diff.items() if any(k == p or (p.endswith(".") and k.startswith(p)) for p in shaping)}


def check_resume(
    saved: Any,
    new: Any,
    done_step: int | None,
    *,
    allow_changed_data: bool,
    shaping_keys: tuple[str, ...] = DATA_SHAPING,
) -> None:
    """Raises ValueError (got/expected) when the resumed config would change the run's data, or asks for no new
    step. `done_step`: the step of the run's latest complete checkpoint (None: no checkpoint); `shaping_keys`: the
    app's data-deciding keys (default: the LLM apps')."""
    shaping = data_changes(changes(saved, new), shaping_keys)
    if shaping and not allow_changed_data:
        listed = "; ".join(f"{k}: {old!r} -> {v!r}" for k, (old, v) in shaping.items())
        raise ValueError(
            f"--resume: expected the settings that decide the run's data to stay as they were, got changes ({listed}); "
            "they would re-train prompts or train other data than the run recorded. Pass --allow-changed-data to "
            "resume anyway (recorded in resumes.jsonl), or start a new run"
        )
    if done_step is not None and new.run.steps <= done_step:
        raise ValueError(
            f"--resume: expected run.steps > {done_step} (the run's latest complete checkpoint), got {new.run.steps}: "
            "there is nothing to train"
        )


def record_resume(run_dir: Path, saved: Any, new: Any, from_step: int | None) -> dict[str, tuple[Any, Any]]:
    """Appends this resume's overrides to `resumes.jsonl`; returns them."""
    diff = changes(saved, new)
    entry = {
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "from_step": from_step,
        "changes": {k: {"from": old, "to": v} for k, (old, v) in diff.items()},
    }
    with (run_dir / RESUMES_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
    return diff
