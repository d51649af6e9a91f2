"""A real Ray cluster started the way a user starts one: `ray get-auth-token --generate`, then
`ray start --head` and `ray start --address=HEAD` (a second node) from the venv, token
authentication on. Isolated: HOME (the token) and RAY_TMPDIR (sessions, the address file that
`--address auto` reads) live in a private folder, and every port is picked free, so parallel runs
never meet.

Stopping: `ray stop` ends every Ray process of the machine by name (other test runs, other
users' clusters), so the harness ends only its own: each `ray start` runs in a new session, its
daemons keep that process group, and the group gets SIGTERM then SIGKILL (what `ray stop` sends).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
# the per-node ports `ray start` otherwise takes from fixed defaults (52365, 8265, ...)
NODE_PORT_FLAGS = ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                   "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout_s: float, step_s: float = 0.1) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step_s)
    return cond()


@dataclass
class RayCluster:
    root: Path
    env: dict                       # HOME with the token, RAY_TMPDIR; RAY_AUTH_MODE left unset
    head_port: int = 0
    groups: list[int] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.head_port}"

    @property
    def session(self) -> Path:
        return self.root / "ray" / "session_latest"

    def log_tails(self, pattern: str, chars: int = 1500) -> str:
        """The end of each session log matching ``pattern`` (for a failing test's message)."""
        return "".join(f"\n== {f.name}\n{f.read_text(errors='replace')[-chars:]}"
                       for f in sorted((self.session / "logs").glob(pattern)))

    def node_ids(self) -> set[str]:
        """Every node writes its agent's port into the session folder, named by its node id."""
        return {f.name.rsplit("_", 1)[1] for f in self.session.glob("dashboard_agent_listen_port_*")}

    def ray(self, *args, env=None, timeout_s=120.0) -> str:
        """One `ray ...` command in a new session (its daemons stay in that process group)."""
        proc = subprocess.Popen([RAY, *args], env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.groups.append(proc.pid)
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise RuntimeError(f"ray {args[0]} took over {timeout_s} s:\n{out[-3000:]}")
        if proc.returncode != 0:
            raise RuntimeError(f"ray {' '.join(args)} failed ({proc.returncode}):\n{out[-3000:]}")
        return out

    def start(self, cpus_per_node=(1, 1)) -> None:
        self.ray("get-auth-token", "--generate")
        self.head_port = free_port()
        common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats",
                  *(f"{flag}={free_port()}" for flag in NODE_PORT_FLAGS)]
        self.ray("start", "--head", f"--port={self.head_port}", f"--num-cpus={cpus_per_node[0]}",
                 "--include-dashboard=false", f"--dashboard-port={free_port()}", *common)
        for cpus in cpus_per_node[1:]:
            common = ["--node-ip-address=127.0.0.1", "--disable-usage-stats",
                      *(f"{flag}={free_port()}" for flag in NODE_PORT_FLAGS)]
            # a joining node only offers its token when told to (RAY_AUTH_MODE=token)
            self.ray("start", f"--address={self.address}", f"--num-cpus={cpus}", *common,
                     env={**self.env, "RAY_AUTH_MODE": "token"})
        if not wait_until(lambda: len(self.node_ids()) == len(cpus_per_node), 30.0):
            raise RuntimeError(f"cluster has nodes {self.node_ids()}, wanted {len(cpus_per_node)}")

    def stop(self, grace_s: float = 2.0) -> list[int]:
        """End this cluster's processes; returns the pids still alive afterwards (should be none)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for g in self.groups:
                try:
                    os.killpg(g, sig)
                except ProcessLookupError:
                    pass
            if wait_until(lambda: not self._alive_groups(), grace_s):
                break
        # a process Ray spawned into a session of its own (seen on a loaded 2-core machine) is not in
        # our groups: found by this cluster's RAY_TMPDIR, killed, and only reported if it survives that
        if not wait_until(lambda: not self.leftovers(), grace_s):
            for pid in self.leftovers():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            wait_until(lambda: not self.leftovers(), 5 * grace_s)
        return self.leftovers()

    def _alive_groups(self) -> list[int]:
        return [g for g in self.groups if _group_alive(g)]

    def leftovers(self) -> list[int]:
        """Processes that still carry this cluster's RAY_TMPDIR (workers rename their command line)."""
        mark = f"RAY_TMPDIR={self.root}".encode()
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    found.append(int(pid))
            except OSError:
                pass
        return [p for p in found if p != os.getpid()]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def make_cluster() -> RayCluster:
    # Ray's unix sockets live under RAY_TMPDIR: a short folder keeps their paths under 108 bytes
    root = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp"))
    (root / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(root / "home"), RAY_TMPDIR=str(root))
    return RayCluster(root, env)


def remove(cluster: RayCluster) -> None:
    shutil.rmtree(cluster.root, ignore_errors=True)
