"""RaySession: a local Ray (dashboard off, loopback only, a temp dir of our own that goes away with it) or an
attached cluster, and the placement group that reserves the trainer's and every rollouter's resources up front.

Reserving everything at start turns "the cluster is too small" into an immediate error that names what is
missing, instead of an actor that waits forever for a CPU.

A local Ray (`LocalRay`) listens on 127.0.0.1 only (GCS, raylet, object manager, every worker's and agent's port):
Ray's C++ servers bind loopback exactly when the node's IP is the string "127.0.0.1", and any other value, other
loopback addresses included, binds all interfaces. `ray.init` rewrites a loopback node IP or cluster address to
the machine's outward address unless Ray clusters are off (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, which Ray reads
once, at import, into `ray._private.ray_constants.ENABLE_RAY_CLUSTER`); ray may be imported before this module,
so that constant is switched off for the duration of `ray.init` when starting a node or attaching to a loopback
address (attaching to another host leaves it alone).

Ray's node start has two waits of its own: the GCS port (`RAY_gcs_server_port_wait_time_s`) and the raylet's
registration with the GCS (`RAY_raylet_start_wait_time_s`, read by Ray's C++ config, and never shorter than the
30 s of Ray's Python loop around it). Both default to 30 s in Ray and follow `ray.node_startup_timeout_s` here.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import math
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # else every Ray worker rebuilds the uv venv

import ray
from ray._private import ray_constants
from ray._raylet import Config as RayCppConfig
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from async_pipeline.ray_session.config import RayConfig

TRAINER_BUNDLE = 0
STARTUP_WAIT_ENV = ("RAY_gcs_server_port_wait_time_s", "RAY_raylet_start_wait_time_s")
STARTUP_TIMEOUT_MESSAGES = ("timed out during startup", "Timed out waiting for file")  # raylet, GCS port file
EXIT_WAIT_S = 5.0  # how long a session process may take to exit after SIGTERM (then SIGKILL)


def _bundle(cpus: float, gpus: float, resource: str = "") -> dict[str, float]:
    out = {"CPU": cpus}
    if gpus > 0:
        out["GPU"] = gpus
    if resource:
        out[resource] = 1.0
    return out


def _session_processes(session_dirs: list[Path]) -> list[int]:
    """Pids of the processes, this one excluded, whose command line names one of `session_dirs`, and of the Ray
    workers (they rename themselves `ray::...`) that hold a file open under one. A session dir belongs to one Ray
    node, so no process of another Ray, nor the app's own launcher, matches."""
    marks = {str(p) for d in session_dirs for p in (d, d.resolve())}
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
        except OSError:  # gone meanwhile
            continue
        hit = any(m in cmd for m in marks)
        if not hit and cmd.startswith("ray::"):
            hit = any(t.startswith(m) for t in _fd_targets(proc) for m in marks)
        if hit:
            found.append(int(proc.name))
    return found


def _fd_targets(proc: Path) -> list[str]:
    """What the process's open file descriptors point to (those that close while being read are skipped)."""
    try:
        fds = list((proc / "fd").iterdir())
    except OSError:  # gone meanwhile, or not ours to read
        return []
    out = []
    for fd in fds:
        with contextlib.suppress(OSError):
            out.append(os.readlink(fd))
    return out


def _end_processes(session_dirs: list[Path]) -> None:
    """SIGTERM, then SIGKILL, to whatever still runs of the session (after a failed start Ray leaves its GCS and
    raylet running); each signal gets EXIT_WAIT_S to work."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_processes(session_dirs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + EXIT_WAIT_S
        while (left := _session_processes(session_dirs)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not left:
            return
    raise RuntimeError(f"ray: expected the session's processes to exit after SIGKILL, got {left} still running")


@contextlib.contextmanager
def _loopback_kept() -> Iterator[None]:
    """While `ray.init` runs: a loopback node IP or cluster address stays loopback (see the module docstring)."""
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


@contextlib.contextmanager
def _startup_waits(timeout_s: int) -> Iterator[None]:
    """While `ray.init` starts a node: Ray's two startup waits last `timeout_s` seconds each. The node's processes
    read the variables when they start; this driver's C++ config may have read them already (ray reads them at
    import when RAY_AUTH_MODE is set), so it re-reads them, as Ray's own token-auth setup does."""
    saved = {k: os.environ.get(k) for k in STARTUP_WAIT_ENV}
    os.environ.update(dict.fromkeys(STARTUP_WAIT_ENV, str(timeout_s)))
    RayCppConfig.initialize("")  # every entry from its RAY_<name> variable, or its default
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_loopback_address(address: str) -> bool:
    """`address` is host:port (Ray's bootstrap address); its host is loopback."""
    host = address.rpartition(":")[0].strip("[]") or address
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _attach(address: str) -> None:
    """Connects this driver to the cluster at `address`; one on this machine's loopback stays reachable there
    (Ray would otherwise rewrite 127.0.0.1 to the machine's outward address, where a loopback-only Ray is not)."""
    with _loopback_kept() if _is_loopback_address(address) else contextlib.nullcontext():
        ray.init(address=address, log_to_driver=True)


@dataclass
class LocalRay:
    """A Ray head node this process started, and what it put on disk.

    Invariants: `temp_dir` is Ray's temp dir; `created_temp_dir` says this process created it (stop removes it
    whole), else stop removes only this node's session dir (`session_<time>_<pid>`, new since start) and the
    `session_latest` link to it. Nothing is removed with `keep_temp_dir`; the node's processes end either way.
    """

    temp_dir: Path
    created_temp_dir: bool
    before: frozenset[str]
    keep_temp_dir: bool
    stopped: bool = False

    @classmethod
    def start(
        cls, cfg: RayConfig, *, num_cpus: int | None = None, log_to_driver: bool = True, app: str = "async_ppo"
    ) -> LocalRay:
        """Starts the node (`address="local"`: never a cluster named by RAY_ADDRESS), in `cfg.temp_dir` or else
        `/tmp/<app>_ray_<pid>`; on any failure its processes and files are gone before the error is raised."""
        if cfg.address:
            raise ValueError(f"ray: a local Ray needs an empty ray.address, got {cfg.address!r}")
        temp = Path(cfg.temp_dir or f"/tmp/{app}_ray_{os.getpid()}")
        before = frozenset(os.listdir(temp)) if temp.is_dir() else frozenset()
        node = cls(temp, not temp.exists(), before, cfg.keep_temp_dir)
        try:
            with _loopback_kept(), _startup_waits(cfg.node_startup_timeout_s):
                ray.init(
                    address="local",
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    _temp_dir=str(temp),
                    _node_ip_address=cfg.node_ip,
                    log_to_driver=log_to_driver,
                    configure_logging=False,
                )
        except Exception as e:
            node.stop()
            if any(m in str(e) for m in STARTUP_TIMEOUT_MESSAGES):
                raise RuntimeError(
                    f"ray: the local Ray node did not start within ray.node_startup_timeout_s = "
                    f"{cfg.node_startup_timeout_s} s (Ray: {e}); on a loaded machine raise --ray.node_startup_timeout_s"
                ) from e
            raise
        if (got := ray.util.get_node_ip_address()) != cfg.node_ip:
            node.stop()
            raise RuntimeError(f"ray: expected the local node's IP to be ray.node_ip = {cfg.node_ip}, got {got}")
        atexit.register(node.stop)  # an exit that skips close (an error before the pipeline's try) still cleans up
        return node

    def session_dirs(self) -> list[Path]:
        """This node's session dirs: new since start, named after this process (Ray's `session_<time>_<pid>`)."""
        if not self.temp_dir.is_dir():
            return []
        new = sorted(set(os.listdir(self.temp_dir)) - self.before)
        ours = [n for n in new if n.startswith("session_") and n.endswith(f"_{os.getpid()}")]
        return [self.temp_dir / n for n in ours if not (self.temp_dir / n).is_symlink()]

    def stop(self) -> None:
        """Shuts Ray down, ends every process of the node, then removes what it put on disk (unless kept).
        Idempotent; also runs at interpreter exit if nobody called it."""
        if self.stopped:
            return
        self.stopped = True
        atexit.unregister(self.stop)
        ray.shutdown(wait_for_processes=True)
        sessions = self.session_dirs()
        _end_processes(sessions)
        if self.keep_temp_dir or not self.temp_dir.exists():
            return
        if self.created_temp_dir:
            shutil.rmtree(self.temp_dir)
            return
        latest = self.temp_dir / "session_latest"
        if latest.is_symlink() and Path(os.readlink(latest)).name in {s.name for s in sessions}:
            latest.unlink()
        for s in sessions:
            shutil.rmtree(s)


@dataclass
class RaySession:
    """`local` is the node this session started (None: attached to `cfg.address`, or to a Ray that was already
    initialized in this process, which `close` leaves running)."""

    cfg: RayConfig
    group: PlacementGroup
    started_here: bool
    local: LocalRay | None

    @classmethod
    def open(cls, cfg: RayConfig, *, extra_cpus: float = 0.0, app: str = "async_ppo") -> RaySession:
        """`extra_cpus`: what other groups of this run reserve later (a distillation teacher pool). A local Ray
        started here then advertises enough CPUs for everything (at least this machine's cores): on a laptop the
        teacher shares the cores with the trainer and the rollouters instead of failing to fit."""
        started_here, local = not ray.is_initialized(), None
        if started_here:
            if cfg.address:
                _attach(cfg.address)
            else:
                reserved = cfg.trainer_cpus + cfg.num_rollouters * cfg.rollouter_cpus + extra_cpus
                num_cpus = max(os.cpu_count() or 1, math.ceil(reserved)) if extra_cpus > 0 else None
                local = LocalRay.start(cfg, num_cpus=num_cpus, app=app)
        bundles = [_bundle(cfg.trainer_cpus, cfg.trainer_gpus, cfg.trainer_resource)]
        bundles += [
            _bundle(cfg.rollouter_cpus, cfg.rollouter_gpus, cfg.rollouter_resource) for _ in range(cfg.num_rollouters)
        ]
        group = placement_group(bundles, strategy=cfg.placement_strategy)
        try:
            ray.get(group.ready(), timeout=cfg.startup_timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            have = ray.cluster_resources()
            cls._end(started_here, local)
            raise RuntimeError(
                f"Ray could not reserve {bundles} (trainer, then one bundle per rollouter) within "
                f"{cfg.startup_timeout_s:.0f} s; the cluster has {have}."
                " Lower ray.rollouter_cpus / ray.trainer_cpus / ray.num_rollouters, add nodes, or check"
                f" ray.placement_strategy ({cfg.placement_strategy}) and the custom resources"
            ) from None
        return cls(cfg, group, started_here, local)

    def trainer_options(self) -> dict[str, Any]:
        return self._options(TRAINER_BUNDLE, self.cfg.trainer_cpus, self.cfg.trainer_gpus)

    def rollouter_options(self, rollouter_id: int) -> dict[str, Any]:
        return self._options(1 + rollouter_id, self.cfg.rollouter_cpus, self.cfg.rollouter_gpus)

    def _options(self, bundle: int, cpus: float, gpus: float) -> dict[str, Any]:
        strategy = PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=bundle)
        return {"num_cpus": cpus, "num_gpus": gpus, "scheduling_strategy": strategy, "max_restarts": 0}

    @staticmethod
    def light_options() -> dict[str, Any]:
        """An actor that waits most of the time (the broker): no reserved CPU, on the driver's node (it lives and
        dies with the driver, never with a worker node)."""
        here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
        return {"num_cpus": 0, "max_restarts": 0, "scheduling_strategy": here}

    def validator_options(self) -> dict[str, Any]:
        """No reserved CPU; on a node with `ray.validator_resource` when it is set, else on the driver's node."""
        if not self.cfg.validator_resource:
            return self.light_options()
        return {"num_cpus": 0, "max_restarts": 0, "resources": {self.cfg.validator_resource: 1.0}}

    @staticmethod
    def _end(started_here: bool, local: LocalRay | None) -> None:
        if local is not None:
            local.stop()
        elif started_here:
            ray.shutdown()  # attached: disconnects only

    def close(self) -> None:
        try:
            remove_placement_group(self.group)
        finally:
            self._end(self.started_here, self.local)
