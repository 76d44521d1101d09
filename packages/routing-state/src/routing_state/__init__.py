"""Versioned routed-expert rows for router replay (R3). numpy only: importing this never imports torch."""

from routing_state.hf_layout import moe_layers, routing_spec
from routing_state.rows import coerce_rows, coerce_versions
from routing_state.spec import RoutingSpec
from routing_state.trace import RoutingTrace

__all__ = ["RoutingSpec", "RoutingTrace", "coerce_rows", "coerce_versions", "moe_layers", "routing_spec"]
