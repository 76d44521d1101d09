"""Flow-matching image models for FlowGRPO."""
