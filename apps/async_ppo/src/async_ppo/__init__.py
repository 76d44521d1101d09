"""The fully asynchronous MoE PPO/GRPO pipeline on Ray (rollouters, prompt broker, trainer)."""
