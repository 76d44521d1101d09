"""The synchronous PPO/GRPO trainer app: generate -> reward -> advantages -> update -> push weights -> validate.

Importing this package is light (no torch); the trainer loop lives in `trainers.sync_ppo.trainer`.
"""
