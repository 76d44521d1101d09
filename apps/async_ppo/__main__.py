"""`uv run apps/async_ppo [--help]` from the repository root runs the asynchronous PPO/GRPO pipeline on Ray."""

from async_ppo.cli import main

if __name__ == "__main__":
    main()
