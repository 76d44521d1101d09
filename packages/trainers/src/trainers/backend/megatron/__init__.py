"""The Megatron-Core training path (issue in progress): our HF-format Qwen3-MoE as a Megatron-Core `GPTModel`
(local layer spec, expert parallel over the default process group), with router replay through Megatron's
`RouterReplay`. `convert` is plain torch; every other module imports Megatron-Core, which only the `megatron`
dependency group installs, in an environment of its own (Python >= 3.12): `bash scripts/test_megatron.sh`."""
