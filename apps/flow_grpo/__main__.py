"""`uv run apps/flow_grpo [--help]` from the repository root runs the FlowGRPO trainer."""

from flow_grpo.cli import main

if __name__ == "__main__":
    main()
