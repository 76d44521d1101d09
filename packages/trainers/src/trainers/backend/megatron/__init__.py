"""The Megatron-Core training backend (`backend.kind megatron`): our Qwen3-MoE and DeepSeek-V3 (multi-latent
attention) checkpoints as a Megatron-Core `GPTModel` (local layer specs, experts split over the expert-parallel
group; `family_build` picks the build by model_type: `gpt` + `convert`, or `deepseek_gpt` + `deepseek_convert`),
router replay through Megatron's `RouterReplay`, weights and checkpoints in our names. `support` (what it trains,
from a config.json), `install`, `convert` and `deepseek_convert` are plain Python or torch; every other module
imports Megatron-Core, which only the `megatron` dependency group installs, in an environment of its own (Python
>= 3.12): `bash scripts/test_megatron.sh`."""
