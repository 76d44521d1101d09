"""The Ray section's checks that need no Ray: node IP, node startup timeout, placement resources."""

from __future__ import annotations

import pytest
from async_pipeline.ray_session.config import RayConfig


def test_a_local_ray_defaults_to_loopback_a_removed_temp_dir_and_a_120_s_node_start() -> None:
    cfg = RayConfig()
    assert (cfg.node_ip, cfg.keep_temp_dir, cfg.node_startup_timeout_s) == ("127.0.0.1", False, 120)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"node_ip": "localhost"}, "expected an IP address"),
        ({"node_ip": "127.0.0.2"}, "exactly 127.0.0.1"),  # Ray would bind every interface for it
        ({"node_ip": "::1"}, "exactly 127.0.0.1"),
        ({"node_ip": "0.0.0.0"}, "expected 127.0.0.1"),
        ({"node_ip": "192.0.2.7", "address": "192.0.2.1:6379"}, "local Ray only"),
        ({"node_startup_timeout_s": 29}, "expected >= 30"),
    ],
)
def test_ray_config_rejects_a_node_ip_ray_would_not_bind_as_asked_and_a_startup_wait_under_30_s(
    fields: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        RayConfig(**fields)
