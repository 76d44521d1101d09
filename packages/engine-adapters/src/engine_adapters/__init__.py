"""vLLM and SGLang engines behind `rollout_core.Engine`, over HTTP. Light: never imports torch, vllm or sglang, and
importing the package itself imports nothing (`rollout_core.server_engine_config` is what `--help` reads).

- `engine_adapters.vllm`: `VLLMServer` (process), `VLLMClient` (HTTP), `VLLMEngine` (adapter) and the worker
  extension that runs inside vLLM (router capture on CPU, weight reload with the CPU MoE re-pack);
- `engine_adapters.sglang`: `SGLangEngine` over SGLang's native API;
- `engine_adapters.vllm.rollout_engine`, `engine_adapters.sglang.rollout_engine`: the adapters as rollout engines
  (a vLLM server they start and own; a push written as an HF folder by the site's `FolderWriter`) and their
  sections, `rollout_core.server_engine_config`;
- `engine_adapters.routing_rows`: routed-expert payload decoding and the N-1 normalisation both use;
- `rollout_core.vllm_families`: the model families the vLLM adapter serves on CPU and their server arguments
  (standard library only, for checks at parse time).
"""
