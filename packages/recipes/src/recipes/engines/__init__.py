"""Rollout engines behind one `RolloutEngine` protocol: generation through `rollout_core.Engine`, plus how a weight
push reaches the engine (in place, or an HF folder a server reloads)."""
