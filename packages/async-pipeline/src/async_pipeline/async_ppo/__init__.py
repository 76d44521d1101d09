"""The asynchronous PPO/GRPO trainer on Ray (on-policy distillation too, with `algorithm.kind opd` and teacher
actors): its config (`AsyncConfig`), the driver's loop over the rollouters, trainer, validator and teacher actors
(`async_pipeline.async_ppo.pipeline.train`) and its report. Importing this package is light (no torch, no Ray)."""
