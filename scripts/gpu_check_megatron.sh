#!/usr/bin/env bash
# GPU check of the Megatron-Core backend, for a machine with a CUDA GPU (run from the repository root, ~3 min):
# builds .megatron-env (Python >= 3.12; the lock's torch is a CUDA build), then runs the `megatron and gpu` tests:
# three PPO steps with router replay on Megatron's GPTModel on one GPU (nccl, Megatron's CUDA RNG tracker, none of
# the CPU workarounds active) follow the torch backend's on the same GPU.
#
# Not covered: expert parallelism over GPUs (one GPU per rank: it needs >= 2), tensor parallelism (not built).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi -L
bash scripts/test_megatron.sh --build-only
UV_PROJECT_ENVIRONMENT="$PWD/.megatron-env" PYTHONWARNINGS=ignore uv run --no-sync pytest -m "megatron and gpu" \
    -p no:cacheprovider -v tests/trainers/test_trainers_megatron_backend.py
