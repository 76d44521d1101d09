"""What the trainer apps (`apps/sync_ppo`, `apps/async_ppo`) share: config sections, generation and scoring of
responses, the step batch, the policy trainer (dumps included), validation, the teachers and the vLLM and SGLang
rollout engines.

An app is an entry point: its loop reads like pseudocode over these pieces. Importing this package (and its config
modules) is light: torch comes with the modules that run models.
"""
