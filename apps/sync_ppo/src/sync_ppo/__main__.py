from sync_ppo.cli import main

main()
