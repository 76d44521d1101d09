from flow_grpo.cli import main

main()
