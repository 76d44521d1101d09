"""Test helpers other packages reuse: a scripted engine double and the engine contract suite."""

from rollout_core.testing.scripted_engine import CallRecord, ScriptedEngine, decode_row, decode_version

__all__ = ["CallRecord", "ScriptedEngine", "decode_row", "decode_version"]
