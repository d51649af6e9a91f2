"""Where eval-many's Ray tasks run: a local Ray instance started here, or an existing cluster joined.

Every failure to get a usable Ray is a ``ClusterError`` with a one-line message, raised within a
bounded time: nothing listening at the address (a TCP probe, not Ray's own connect loop, which
retries for many minutes), authentication refused, Ray Client without its extra, or a cluster
where no node has the CPUs/GPUs one task reserves (Ray would keep such a task pending forever).
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

AUTH_MODE = "RAY_AUTH_MODE"
PROBE_TIMEOUT_S = 5.0


class ClusterError(RuntimeError):
    """Ray cannot run the evaluations (bad address, refused token, too few resources)."""


def token_available() -> bool:
    """A Ray token where Ray looks for one: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    return Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").is_file()


def choose_auth_mode(address: str | None) -> None:
    """An explicit RAY_AUTH_MODE always wins. Otherwise: the local instance only listens on this
    machine, so no token (and no token file left behind); a cluster gets the token the user has,
    as Ray itself does for 'auto' but not for an explicit host:port (which would then be refused)."""
    if AUTH_MODE in os.environ:
        return
    if address is None:
        os.environ[AUTH_MODE] = "disabled"
    elif token_available():
        os.environ[AUTH_MODE] = "token"


def gcs_endpoint(address: str) -> tuple[str, int]:
    """host, port of the cluster's GCS for 'auto' (the last `ray start` here) or 'host:port'."""
    if address == "auto":
        from ray._private.services import canonicalize_bootstrap_address

        try:
            resolved = canonicalize_bootstrap_address(address)
        except ConnectionError as e:
            raise ClusterError(f"--address auto: {_first_line(e)}") from e
        if resolved is None:
            raise ClusterError("--address auto: no Ray cluster was started on this machine (ray start --head)")
        address = resolved
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"--address {address!r}: expected HOST:PORT, 'auto' or ray://HOST:PORT")
    return host, int(port)


def probe(host: str, port: int, what: str) -> None:
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        raise ClusterError(f"nothing answers at {host}:{port} ({what}): {e.strerror or e}; "
                           "is the cluster started (ray start --head) and the port right?") from e


def check_client_extra(address: str) -> None:
    try:
        import grpc  # noqa: F401  (Ray Client's transport; not a dependency of ray itself)
    except ImportError:
        raise ClusterError(f"--address {address}: Ray Client needs grpcio, which this install leaves out "
                           "(docs/eval_many.md); run eval-many on a node of the cluster with --address "
                           "HEAD:PORT or auto") from None


def start_ray(address: str | None, num_cpus: int | None):
    """Join ``address`` ('auto', 'host:port', 'ray://host:10001') or start a local instance."""
    choose_auth_mode(address)  # before Ray is imported: it reads the mode once
    if address is not None:
        if address.startswith("ray://"):
            check_client_extra(address)
            probe(*gcs_endpoint(address.removeprefix("ray://")), "Ray Client server")
        else:
            probe(*gcs_endpoint(address), "Ray GCS")
    import ray

    if ray.is_initialized():
        return ray
    if address is None:
        ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 1024 * 1024, configure_logging=False)
        return ray
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError) as e:
        hint = ""
        if address.startswith("ray://"):
            hint = "; Ray Client also times out like this on a wrong or missing token"
        elif _refused_token(e):
            hint = (": token refused (the cluster's token goes in ~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or "
                    f"RAY_AUTH_TOKEN; RAY_AUTH_MODE is {os.environ.get(AUTH_MODE, 'unset')})")
        raise ClusterError(f"cannot join the Ray cluster at {address}: {_first_line(e)}{hint}") from e
    return ray


def check_fits(ray, num_cpus: float, num_gpus: float, where: str) -> None:
    """Some live node must have the task's reservation in total, or the task would wait forever."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= num_cpus and r.get("GPU", 0) >= num_gpus for r in nodes):
        return
    largest = ", ".join(f"{r.get('CPU', 0):g} CPU {r.get('GPU', 0):g} GPU" for r in nodes) or "no live node"
    raise ClusterError(f"no node of {where} has {num_cpus:g} CPU + {num_gpus:g} GPU for one task "
                       f"(nodes: {largest}); lower --num-cpus/--num-gpus or add a node")


def where_am_i() -> dict:
    """Which node of the cluster ran this task (for the report)."""
    import ray

    return {"ray_node_id": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}


def _refused_token(e: BaseException | None) -> bool:
    while e is not None:
        if type(e).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
