"""The `ray` section: where a Ray-based app runs (a local Ray or a cluster) and what it reserves per role.
Standard library only (`--help` imports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from run_lifecycle.fields import help_field


@dataclass
class RayConfig:
    address: str = help_field("Ray cluster to attach to (empty: start a local Ray, dashboard off)", "")
    node_ip: str = help_field(
        "IP address of a local Ray's node: 127.0.0.1 keeps every Ray port (GCS, raylet, object manager, workers, "
        "agents) on loopback; another address of this machine is advertised and Ray listens on all interfaces "
        "(an attached cluster keeps its own addresses)",
        "127.0.0.1",
    )
    temp_dir: str = help_field("local Ray's temp dir (empty: /tmp/<app>_ray_<pid>)", "")
    keep_temp_dir: bool = help_field(
        "keep the local Ray's temp dir (logs, session files) after the run; false: removed when the run ends, after "
        "an error too (an existing dir loses only this run's session_* entry)",
        False,
    )
    node_startup_timeout_s: int = help_field(
        "seconds a local Ray's node may take to start, for each of Ray's two waits (GCS port, raylet registration; "
        "Ray's own default is 30 s each); at least 30",
        120,
    )
    num_rollouters: int = help_field("rollouter actors (each owns one engine)", 1)
    rollouter_cpus: float = help_field("CPUs reserved per rollouter", 1.0)
    trainer_cpus: float = help_field("CPUs reserved for the trainer (its torch threads: run.torch_threads)", 1.0)
    rollouter_threads: int = help_field("torch threads of each rollouter's process (its native engine)", 1)
    helper_niceness: int = help_field(
        "niceness added to rollouter and validator processes: where they share cores with the trainer (the "
        "bottleneck of a small CPU run) the trainer goes first; 0: off",
        5,
    )
    rollouter_gpus: float = help_field("GPUs reserved per rollouter", 0.0)
    trainer_gpus: float = help_field("GPUs reserved for the trainer", 0.0)
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = help_field(
        "how the placement group lays the trainer's and the rollouters' bundles over nodes (Ray's strategies; PACK: "
        "as few nodes as possible)",
        "PACK",
    )
    trainer_resource: str = help_field(
        "a custom Ray resource the trainer's bundle reserves 1 unit of (a node label such as trainer_node, given to "
        "`ray start --resources`); empty: none",
        "",
    )
    rollouter_resource: str = help_field(
        "a custom Ray resource each rollouter's bundle reserves 1 unit of; empty: none", ""
    )
    validator_resource: str = help_field(
        "a custom Ray resource the validator reserves 1 unit of; empty: it runs on the driver's node", ""
    )
    startup_timeout_s: float = help_field("seconds to wait for the resources (placement group) before failing", 60.0)
    call_timeout_s: float = help_field("seconds a weight push or checkpoint call may take before it is an error", 300.0)
    stall_timeout_s: float = help_field(
        "seconds without a complete group before the trainer gives up with an error", 600.0
    )

    def __post_init__(self) -> None:
        if self.num_rollouters < 1 or self.rollouter_threads < 1:
            raise ValueError(
                f"ray: expected num_rollouters >= 1 and rollouter_threads >= 1, got {self.num_rollouters}, "
                f"{self.rollouter_threads}"
            )
        if min(self.rollouter_cpus, self.trainer_cpus, self.rollouter_gpus, self.trainer_gpus) < 0:
            raise ValueError("ray: expected non-negative CPU and GPU reservations")
        for name in ("trainer_resource", "rollouter_resource", "validator_resource"):
            value = getattr(self, name)
            if value != value.strip() or any(c.isspace() for c in value) or value in ("CPU", "GPU", "memory"):
                raise ValueError(
                    f"ray.{name}: expected the name of a custom resource (no spaces, not CPU, GPU or "
                    f"memory) or empty, got {value!r}"
                )
        if self.node_startup_timeout_s < 30:
            raise ValueError(
                f"ray.node_startup_timeout_s: expected >= 30 (Ray waits at least 30 s for its raylet), got "
                f"{self.node_startup_timeout_s}"
            )
        self._check_node_ip()

    def _check_node_ip(self) -> None:
        import ipaddress

        try:
            ip = ipaddress.ip_address(self.node_ip)
        except ValueError:
            raise ValueError(f"ray.node_ip: expected an IP address, got {self.node_ip!r}") from None
        if ip.is_unspecified or (ip.is_loopback and self.node_ip != "127.0.0.1"):
            raise ValueError(
                f"ray.node_ip: expected 127.0.0.1 (loopback only) or an address of this machine, got {self.node_ip}:"
                " Ray binds loopback only for exactly 127.0.0.1 and all interfaces otherwise"
            )
        if self.address and self.node_ip != "127.0.0.1":
            raise ValueError(
                f"ray.node_ip: applies to a local Ray only, got {self.node_ip} with ray.address {self.address!r}"
            )
