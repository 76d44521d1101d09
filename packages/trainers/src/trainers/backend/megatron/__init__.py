"""The Megatron-Core training backend (`backend.kind megatron`): our HF-format Qwen3-MoE as a Megatron-Core
`GPTModel` (local layer spec, experts split over the expert-parallel group), router replay through Megatron's
`RouterReplay`, weights and checkpoints in our names; and transformers' DeepSeek-V3 as a `GPTModel` with
multi-latent attention (`deepseek_gpt`, weights by `deepseek_convert`), not yet wired into the backend. `convert`,
`deepseek_convert` and `install` are plain Python/torch; every other
module imports Megatron-Core, which only the `megatron` dependency group installs, in an environment of its own
(Python >= 3.12): `bash scripts/test_megatron.sh`."""
