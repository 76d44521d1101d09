"""The synchronous PPO/GRPO trainer (on-policy distillation too, with `algorithm.kind opd` and a teacher): generate
-> reward -> advantages -> update -> push weights -> validate, in one process. `trainers.sync_ppo.trainer.train`
runs a whole run from a `trainers.sync_ppo.config.SyncConfig`; importing this package is light (no torch)."""
