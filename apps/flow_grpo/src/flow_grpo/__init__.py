"""FlowGRPO app."""
