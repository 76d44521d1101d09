"""FlowGRPO (GRPO for flow-matching image models): sample-level group advantages, the per-denoising-step clipped
policy loss with an optional KL to the reference model, the compute-only `FlowBackend` and `flow_train_step`; the
step rollouter and its `RolloutBatch`, the rewards, the base a run starts from, the batches in flight, validation
and the run's pictures."""
