#!/usr/bin/env bash
# GPU check of the VeOmni backend, for a machine with a CUDA GPU (run from the repository root, ~3 min):
# builds .veomni-env (the lock's torch is a CUDA build), then runs the `veomni and gpu` tests: VeOmni's model on
# the GPU (eager ops, fp32) gives the torch backend's log-probs, loss and gradients on the same GPU, with and
# without router replay.
#
# Not covered: VeOmni's expert parallelism. It runs only through VeOmni's fused MoE kernels (Triton, bf16) and
# needs one GPU per rank (NCCL refuses two ranks on one device), so it needs >= 2 GPUs; see docs/veomni.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
nvidia-smi -L
bash scripts/test_veomni.sh --build-only
UV_PROJECT_ENVIRONMENT="$PWD/.veomni-env" uv run --no-sync pytest -m "veomni and gpu" -p no:cacheprovider -v \
    tests/trainers/test_trainers_veomni_parity.py
