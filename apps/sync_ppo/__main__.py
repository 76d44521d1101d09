"""`uv run apps/sync_ppo [--help]` from the repository root runs the synchronous PPO/GRPO trainer."""

from sync_ppo.cli import main

if __name__ == "__main__":
    main()
