"""NodeAware: a base for Ray actors that can say which node they run on (an app records where each role landed)."""

from __future__ import annotations


class NodeAware:
    def node_id(self) -> str:
        """This actor's Ray node id (hex)."""
        import ray

        return ray.get_runtime_context().get_node_id()
