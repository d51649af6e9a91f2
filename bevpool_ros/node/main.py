"""Entry point of ``bevpool_node`` (console script and ``ros2 run bevpool_ros bevpool_node``)."""
from __future__ import annotations

import os
import sys

from ..ros.process import (
    RosArgumentsError,
    init_without_signal_handlers,
    spin_until_shutdown,
    use_large_data_profile,
)

DISCOVERY_ENV = "ROS_AUTOMATIC_DISCOVERY_RANGE"


class RestartWithProfile(Exception):
    """The node's input topics need a Fast DDS profile this process has not loaded."""

    def __init__(self, env: dict):
        super().__init__("restarting with the input size guard")
        self.env = env


def input_size_guard(base_profile: str | None, probing: bool = False):
    """The node's check of its resolved input topics: 'dds' when Fast DDS bounds them,
    RestartWithProfile when a re-start can make it so, else the reason it cannot. ``probing``
    (a start that only reads its parameters, see main): always RestartWithProfile."""
    from ..private_cache import cache_root
    from ..ros import dds_guard

    def check(topics, depth) -> str:
        if dds_guard.is_guarded(topics, depth):
            found = "dds"
        else:
            why = dds_guard.unavailable_reason(base_profile)
            env = None if why else dds_guard.restart_environment(base_profile, topics, depth, cache_root() / "dds")
            if env is not None:
                raise RestartWithProfile(env)
            found = f"node only ({why or 'the profile could not be written'})"
        if probing:
            raise RestartWithProfile({dds_guard.RESTARTED_ENV: "1"})
        return found
    return check


def node_usage() -> str:
    from ..params.table import PARAMS
    from ..ros.usage import usage

    return usage("bevpool_node", "Synchronised camera depth + feature topics -> BEV grid (BEVPoolV3) on "
                 "bev/features; a managed node that configures and activates itself (autostart).",
                 [(p.name, p.type, p.default, p.description) for p in PARAMS], "docs/parameters.md")


def refused(why) -> int:
    """A configuration refused at start: one line on stderr, exit status 2."""
    print(f"bevpool_node: invalid configuration: {why}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    """``argv``: rclpy's, the program name first (default: sys.argv)."""
    from ..params.files import ParamsFileError, check_files_readable
    from ..ros.usage import wants_help

    argv = list(argv if argv is not None else sys.argv)
    if wants_help(argv[1:]):
        print(node_usage())
        return 0
    try:
        params_files = check_files_readable(argv)  # rcl would raise a multi-line error on them
    except ParamsFileError as e:
        return refused(e)
    import rclpy

    from ..heap import keep_freed_memory
    from ..ros import dds_guard
    from ..ros.executor import make_executor
    from ..ros.stderr_filter import StderrFilter
    from .node import BevPoolNode, StartupError

    keep_freed_memory()  # before the first multi-megabyte message (bevpool_ros/heap.py)
    base_profile = use_large_data_profile()
    # The input size guard needs the resolved input topics, so a first start reads its parameters
    # and then re-executes itself under a profile bounding them (dds_guard). That first start has
    # discovery off: peers that saw it and missed its exit kept its proxy (same pid, maybe the
    # same GUID prefix) and the real node's services looked ready but never answered.
    probing = dds_guard.unavailable_reason(base_profile) is None
    discovery = os.environ.get(DISCOVERY_ENV)
    if probing:
        os.environ[DISCOVERY_ENV] = "OFF"
    try:
        stop = init_without_signal_handlers(argv)
    except RosArgumentsError as e:
        return refused(e)
    try:
        node = BevPoolNode(input_guard=input_size_guard(base_profile, probing), params_files=params_files)
    except RestartWithProfile as r:  # same process id (launch keeps tracking it), new profile
        restart_env = r.env
    except StartupError as e:
        rclpy.try_shutdown()
        stop.restore()  # main may be called in-process (tests): leave the caller's handlers
        return refused(e)
    except KeyboardInterrupt:  # Ctrl-C while starting up is a clean stop too
        rclpy.try_shutdown()
        stop.restore()
        return 0
    else:
        if not probing:
            executor, node.executor_kind = make_executor(node.get_parameter("executor").value,
                                                         node.get_logger())
            middleware_lines = StderrFilter(node.report.count, node.get_parameter("log_throttle_s").value)
            middleware_lines.install()
            try:
                return spin_until_shutdown(executor, node, stop, watchdog_for(node, stop, middleware_lines))
            finally:
                middleware_lines.close()
        node.destroy_node()  # unconfigured (autostart false): start again, discoverable
        restart_env = {dds_guard.RESTARTED_ENV: "1"}
    restart_with(restart_env, discovery)


def watchdog_for(node, stop, stderr_filter):
    """The process's watchdog (ros/liveness.py), or None with ``watchdog.timeout_s`` 0."""
    from ..ros.liveness import Watchdog

    timeout = float(node.get_parameter("watchdog.timeout_s").value)
    if timeout <= 0:
        return None
    return Watchdog(node, timeout, stop.wake_fd, fault_fd=stderr_filter.original,
                    before_exit=stderr_filter.flush)


def restart_with(env: dict, discovery: str | None) -> None:
    """Replace this process (same pid: launch keeps tracking it) by a fresh start under ``env``,
    with the caller's discovery setting back. The DDS context goes first, and the shared-memory
    segments still mapped are unlinked (64 MiB each under the shipped profile): no destructor
    runs across an exec, so they would outlive the process."""
    import gc

    import rclpy

    from ..ros.dds_shm import release_own_segments

    rclpy.try_shutdown()
    gc.collect()  # the half-built node and its handles: the context is destroyed once unused
    rclpy.get_default_context().destroy()
    release_own_segments()
    profile = env.get("FASTDDS_DEFAULT_PROFILES_FILE")
    if profile:
        print(f"bevpool_node: restarting once with {profile} (input tensors size-bounded by Fast DDS)",
              file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    new_env = dict(os.environ, **env)
    new_env.pop(DISCOVERY_ENV, None)
    if discovery is not None:
        new_env[DISCOVERY_ENV] = discovery
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], new_env)


if __name__ == "__main__":
    sys.exit(main())
