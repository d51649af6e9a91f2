"""Entry point of ``bevpool_node`` (console script and ``ros2 run bevpool_ros bevpool_node``)."""
from __future__ import annotations

import os
import sys

PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
DISCOVERY_ENV = "ROS_AUTOMATIC_DISCOVERY_RANGE"


def use_large_data_profile() -> str | None:
    """Point Fast DDS at config/dds/fastdds_large_data.xml unless another profile is configured;
    returns the shipped profile's path when it is the one in use (set here or by a parent
    process), None otherwise.

    Must run before rclpy.init. Opt out with BEVPOOL_DDS_PROFILE=0; another RMW ignores it.
    Also frees the segments of killed processes first: each holds 64 MiB of RAM under this profile.
    """
    from ..paths import config_dir

    path = str(config_dir() / "dds" / "fastdds_large_data.xml")
    if os.environ.get("BEVPOOL_DDS_PROFILE", "1") == "0" or not os.path.isfile(path):
        return None
    configured = [os.environ[v] for v in PROFILE_VARS if os.environ.get(v)]
    if configured and configured != [path]:
        return None
    if not configured:
        if os.path.exists("DEFAULT_FASTDDS_PROFILES.xml") or os.path.exists("DEFAULT_FASTRTPS_PROFILES.xml"):
            return None
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = path
    free_dead_segments()
    return path


def free_dead_segments() -> None:
    """Remove the Fast DDS segments of dead processes (``dds_shm``), saying so on stderr."""
    from .dds_shm import remove_dead_segments

    count, freed = remove_dead_segments()
    if count:
        print(f"bevpool: removed {count} shared-memory segment(s) of killed Fast DDS processes "
              f"({freed / 2**20:.0f} MiB of RAM)", file=sys.stderr)


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
    from . import dds_guard

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


def main(argv=None) -> int:
    from .usage import node_usage, wants_help

    if wants_help((argv if argv is not None else sys.argv)[1:]):
        print(node_usage())
        return 0
    import rclpy

    from ..heap import keep_freed_memory
    from . import dds_guard
    from .executor import make_executor
    from .node import BevPoolNode, StartupError
    from .stderr_filter import StderrFilter

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
    stop = init_without_signal_handlers(argv)
    try:
        node = BevPoolNode(input_guard=input_size_guard(base_profile, probing))
    except RestartWithProfile as r:  # same process id (launch keeps tracking it), new profile
        restart_env = r.env
    except StartupError as e:
        print(f"bevpool_node: invalid configuration: {e}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    except KeyboardInterrupt:  # Ctrl-C while starting up is a clean stop too
        rclpy.try_shutdown()
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
    """The process's watchdog (node/liveness.py), or None with ``watchdog.timeout_s`` 0."""
    from .liveness import Watchdog

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

    from .dds_shm import release_own_segments

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


class StopSignals:
    """SIGINT/SIGTERM only set ``requested``; ``spin_until_shutdown`` sees it between two spins.
    Their C-level handler also writes to a pipe whose read end is ``wake_fd``: the watchdog reads
    it, so a stop is honoured even while the spinning thread is stuck (node/liveness.py)."""

    def __init__(self):
        import signal

        from .liveness import wake_fd_on_signals

        self.requested = False
        self._previous = {sig: signal.signal(sig, self._request) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.wake_fd = wake_fd_on_signals()

    def _request(self, *_):
        self.requested = True

    def restore(self) -> None:
        import signal

        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        if self.wake_fd is not None:
            signal.set_wakeup_fd(-1)


# How long a Python thread may hold the GIL while another waits (CPython's default: 5 ms). The
# node's threads hand each set over: the executor (or the hand-off signal thread) completes it,
# the pooling thread pools it. At 5 ms a set could wait that long for a busy executor to yield;
# at 0.5 ms it waits at most that (issue 15: queue wait p50 2.0 / p99 5.2 ms on the H200 host).
GIL_SWITCH_INTERVAL_S = 0.0005


def init_without_signal_handlers(argv=None) -> StopSignals:
    """rclpy.init with the short GIL switch interval above, and without rclpy's SIGINT/SIGTERM
    handlers, which shut the context down from under the running node: tearing the node down on
    that dead context crashed the process (a segfault in Fast DDS threads in about 1 of 40 Ctrl-C
    stops). Here a signal only asks for a stop (also during start-up), and the teardown runs in
    order on a live context."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    stop = StopSignals()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    return stop


def spin_until_shutdown(executor, node, stop: StopSignals, watchdog=None, poll_s: float = 0.1) -> int:
    """Spin ``node`` until a stop is requested (or the context shuts down), then tear down in order:
    executor, node, context. 0 on a clean stop. Shared by bevpool_node and bevpool_occupancy.
    ``watchdog`` (node/liveness.py) hears a beat after every spin."""
    import faulthandler

    import rclpy
    from rclpy.executors import ExternalShutdownException

    beat = watchdog.beat if watchdog is not None else (lambda: None)
    try:
        executor.add_node(node)
        if watchdog is not None:
            watchdog.start()
        while not stop.requested and rclpy.ok():  # a signal is seen within poll_s
            executor.spin_once(timeout_sec=poll_s)
            beat()
    except ExternalShutdownException:
        pass
    finally:
        if watchdog is not None:
            watchdog.stop()
        executor.remove_node(node)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        stop.restore()
        faulthandler.cancel_dump_traceback_later()  # the watchdog's backstop: the teardown is done
    return 0


if __name__ == "__main__":
    sys.exit(main())
