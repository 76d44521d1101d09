"""A local Ray started as the app starts it (`RaySession.open`, one Ray session for the module) listens on loopback
only, on every port of every process (GCS, raylet, driver, workers, agents), and a second driver attached to it
with `--ray.address` leaves the node, its processes and its temp dir alone when it closes."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import RaySession

pytestmark = pytest.mark.slow

IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Listener:
    pid: int
    name: str
    address: IP
    port: int

    def on_loopback(self) -> bool:
        mapped = self.address.ipv4_mapped if isinstance(self.address, ipaddress.IPv6Address) else None
        return self.address.is_loopback or (mapped is not None and mapped.is_loopback)


def _listening_tcp_sockets() -> dict[int, tuple[IP, int]]:
    """Socket inode -> (local address, port) of every TCP socket in LISTEN state (st 0A) of this network namespace;
    /proc/net/tcp{,6} print each address as 32-bit words in host (little-endian) order."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            out[int(fields[9])] = (ipaddress.ip_address(raw), int(hex_port, 16))
    return out


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # comm may hold spaces and parentheses
        except (OSError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def _listeners(pids: set[int]) -> list[Listener]:
    sockets = _listening_tcp_sockets()
    out = []
    for pid in sorted(pids):
        name = _name(pid)
        for link in _fd_targets(pid):
            if link.startswith("socket:[") and (inode := int(link[8:-1])) in sockets:
                out.append(Listener(pid, name or "?", *sockets[inode]))
    return out


def _fd_targets(pid: int) -> list[str]:
    """What `pid`'s open file descriptors point to; one that closes while being read is skipped (listing this
    process's own fds opens, then closes, one for the listing)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            out.append(os.readlink(fd))
        except OSError:
            continue
    return out


@ray.remote(num_cpus=0)
class Echo:
    def pid(self) -> int:
        return os.getpid()


@ray.remote(num_cpus=0)
def worker_pid() -> int:
    return os.getpid()


@pytest.fixture(scope="module")
def session() -> Iterator[RaySession]:
    temp = f"/tmp/aprs_{uuid.uuid4().hex[:8]}"  # short: Ray's socket paths under it must fit AF_UNIX's 107 bytes
    opened = RaySession.open(RayConfig(temp_dir=temp, trainer_cpus=0.25, rollouter_cpus=0.25))
    yield opened
    opened.close()


def test_a_local_ray_listens_on_loopback_only_on_every_port_of_every_process(session: RaySession) -> None:
    actor = Echo.remote()
    worker_pids = {ray.get(actor.pid.remote()), ray.get(worker_pid.remote())}
    listeners = _listeners({os.getpid()} | _descendants(os.getpid()))
    names = {x.name for x in listeners}
    assert {"gcs_server", "raylet"} <= names, f"expected the GCS and raylet among the listeners, got {listeners}"
    assert worker_pids <= {x.pid for x in listeners}, f"expected workers {worker_pids} to listen, got {listeners}"
    assert os.getpid() in {x.pid for x in listeners}, "expected the driver's own core worker port"
    exposed = [x for x in listeners if not x.on_loopback()]
    assert not exposed, f"expected every Ray port on 127.0.0.0/8 or ::1, got these on other addresses: {exposed}"
    ray.kill(actor)


ATTACH = """
import json, sys
from async_pipeline.ray_session.config import RayConfig
from async_pipeline.ray_session.session import RaySession
s = RaySession.open(RayConfig(address=sys.argv[1], trainer_cpus=0.25, rollouter_cpus=0.25))
print(json.dumps({"local": s.local is not None, "started_here": s.started_here}))
s.close()
"""


def test_a_driver_attached_with_ray_address_leaves_the_node_and_its_temp_dir_alone(session: RaySession) -> None:
    assert session.local is not None
    sessions = session.local.session_dirs()
    assert len(sessions) == 1
    ray_pids = _descendants(os.getpid())
    env = dict(os.environ, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    gcs = ray.get_runtime_context().gcs_address
    out = subprocess.run([sys.executable, "-c", ATTACH, gcs], capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == {"local": False, "started_here": True}
    assert sessions[0].is_dir() and (sessions[0] / "logs").is_dir()
    assert ray.get(worker_pid.remote()) > 0  # the node still serves tasks
    alive = {_name(p) for p in ray_pids} - {None}
    assert {"gcs_server", "raylet"} <= alive, f"expected the node's GCS and raylet alive, got {alive}"
