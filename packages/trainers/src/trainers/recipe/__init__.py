"""One LLM RL run's assembly, shared by `apps/sync_ppo` and `apps/async_ppo`: the config sections (`RecipeConfig`),
the run's setup (directory, task, warm-up base,
tokenizer, lengths, teachers) and the policy trainer (scored samples -> step batch -> `trainers.train_step` -> dump
and metrics). An app is an entry point: its loop reads like pseudocode over these pieces. Importing this package and
its config modules is light: torch comes with the modules that run models.
"""
