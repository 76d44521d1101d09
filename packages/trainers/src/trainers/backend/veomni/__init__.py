"""The VeOmni training backend (`backend.kind veomni`): VeOmni's Qwen3-MoE, its FSDP2 sharding, its router-replay
hook, behind the same `TrainingBackend` seam as `TorchBackend`. Importing a module here (but `install`) imports
VeOmni, which only the `veomni` dependency group installs (`bash scripts/test_veomni.sh`); `trainers.backend.config`
does not."""
