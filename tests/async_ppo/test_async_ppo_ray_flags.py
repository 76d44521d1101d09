"""The `ray` section from async_ppo's command line: node IP, temp dir, startup wait and placement flags."""

from __future__ import annotations

import pytest
from async_pipeline.ray_session.config import RayConfig
from async_ppo.cli import parse


def test_the_new_ray_flags_parse_from_the_command_line() -> None:
    cfg, _ = parse(["--ray.node_ip", "192.0.2.7", "--ray.keep_temp_dir", "true", "--ray.node_startup_timeout_s", "45"])
    assert (cfg.ray.node_ip, cfg.ray.keep_temp_dir, cfg.ray.node_startup_timeout_s) == ("192.0.2.7", True, 45)


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
