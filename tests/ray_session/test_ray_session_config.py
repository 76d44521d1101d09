"""The Ray section's checks that need no Ray: node IP, node startup timeout, keep_temp_dir from the command line."""

from __future__ import annotations

import pytest
from async_ppo.cli import parse
from ray_session.config import RayConfig


def test_a_local_ray_defaults_to_loopback_a_removed_temp_dir_and_a_120_s_node_start() -> None:
    cfg = RayConfig()
    assert (cfg.node_ip, cfg.keep_temp_dir, cfg.node_startup_timeout_s) == ("127.0.0.1", False, 120)


def test_the_new_ray_flags_parse_from_the_command_line() -> None:
    cfg, _ = parse(["--ray.node_ip", "192.0.2.7", "--ray.keep_temp_dir", "true", "--ray.node_startup_timeout_s", "45"])
    assert (cfg.ray.node_ip, cfg.ray.keep_temp_dir, cfg.ray.node_startup_timeout_s) == ("192.0.2.7", True, 45)


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


def test_placement_flags_parse_and_a_resource_name_must_be_a_custom_one() -> None:
    cfg, _ = parse(["--ray.placement_strategy", "SPREAD", "--ray.trainer_resource", "trainer_node",
                    "--ray.rollouter_resource", "rollout_node",
                    "--ray.validator_resource", "validate_node"])  # fmt: skip
    got = (cfg.ray.placement_strategy, cfg.ray.trainer_resource, cfg.ray.rollouter_resource, cfg.ray.validator_resource)
    assert got == ("SPREAD", "trainer_node", "rollout_node", "validate_node")
    assert RayConfig().placement_strategy == "PACK" and RayConfig().trainer_resource == ""
    for bad in ("GPU", "two words", " padded"):
        with pytest.raises(ValueError, match="expected the name of a custom resource"):
            RayConfig(rollouter_resource=bad)
