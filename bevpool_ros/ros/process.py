"""Process helpers every ROS executable here shares (bevpool_node, bevpool_occupancy, the demo and
bag tools): the Fast DDS large-data profile, rclpy.init without rclpy's signal handlers, and the
spin loop that stops on SIGINT/SIGTERM and tears down in order."""
from __future__ import annotations

import functools
import os
import sys

PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")
QOS_FROM_XML = "RMW_FASTRTPS_USE_QOS_FROM_XML"


def use_large_data_profile() -> str | None:
    """Point Fast DDS at config/dds/fastdds_large_data.xml unless another profile is configured;
    returns the shipped profile's path when it is the one in use (set here or by a parent
    process), None otherwise. With it, ``RMW_FASTRTPS_USE_QOS_FROM_XML=1`` unless the environment
    says otherwise: the profile's reader memory policy (DYNAMIC: a payload lives as long as its
    sample) is then the one in force (reader_memory_policy).

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
    os.environ.setdefault(QOS_FROM_XML, "1")
    free_dead_segments()
    return path


@functools.cache  # fixed once the middleware has started
def reader_memory_policy() -> str:
    """What this process's DDS readers do with payloads (reported in /diagnostics)."""
    from ..paths import config_dir
    from .dds_guard import GUARD_ENV, uses_fast_dds

    if not uses_fast_dds():
        return f"{os.environ.get('RMW_IMPLEMENTATION')}'s own"
    shipped = str(config_dir() / "dds" / "fastdds_large_data.xml")
    if os.environ.get("FASTDDS_DEFAULT_PROFILES_FILE") != shipped and not os.environ.get(GUARD_ENV):
        return "your Fast DDS profile's (bevpool_ros's is not in use)"
    if os.environ.get(QOS_FROM_XML) != "1":
        return f"rmw's PREALLOCATED_WITH_REALLOC ({QOS_FROM_XML} is not 1): readers keep the largest payloads"
    return "dynamic: a payload lives as long as its sample"


def free_dead_segments() -> None:
    """Remove the Fast DDS segments of dead processes (``dds_shm``), saying so on stderr."""
    from .dds_shm import remove_dead_segments

    count, freed = remove_dead_segments()
    if count:
        print(f"bevpool: removed {count} shared-memory segment(s) of killed Fast DDS processes "
              f"({freed / 2**20:.0f} MiB of RAM)", file=sys.stderr)


class StopSignals:
    """SIGINT/SIGTERM only set ``requested``; ``spin_until_shutdown`` sees it between two spins.
    Their C-level handler also writes to a pipe whose read end is ``wake_fd``: the watchdog reads
    it, so a stop is honoured even while the spinning thread is stuck (ros/liveness.py)."""

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
# at 0.5 ms it waits at most that (at 5 ms: queue wait p50 2.0 / p99 5.2 ms on the H200 host).
GIL_SWITCH_INTERVAL_S = 0.0005


class RosArgumentsError(RuntimeError):
    """rcl refused the command line's ROS arguments (a -p value or params file it cannot parse);
    the message is rcl's, in one line without its source locations."""


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
    try:
        rclpy.init(args=argv if argv is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as e:  # rcl's RCLError: a multi-line traceback for what is a usage error
        import re

        stop.restore()
        text = " ".join(str(e).split())
        raise RosArgumentsError(re.sub(r",? at \S+:\d+", "", text)) from None
    return stop


PROFILE_ENV = "BEVPOOL_PROFILE_EXECUTOR"  # a file: the executor thread's cProfile statistics at exit


def _executor_profile():
    """A measurement aid (bench/latency.py --profile-executor): where the spinning thread's CPU time
    goes, by function (a wait that sleeps costs nothing); None unless BEVPOOL_PROFILE_EXECUTOR names a
    file."""
    if not os.environ.get(PROFILE_ENV):
        return None
    import cProfile
    import time

    return cProfile.Profile(time.thread_time)


def spin_until_shutdown(executor, node, stop: StopSignals, watchdog=None, poll_s: float = 0.1) -> int:
    """Spin ``node`` until a stop is requested (or the context shuts down), then tear down in order:
    executor, node, context. 0 on a clean stop. Shared by bevpool_node and bevpool_occupancy.
    ``watchdog`` (ros/liveness.py) hears a beat after every spin."""
    import faulthandler

    import rclpy
    from rclpy.executors import ExternalShutdownException

    beat = watchdog.beat if watchdog is not None else (lambda: None)
    profile = _executor_profile()
    try:
        executor.add_node(node)
        if watchdog is not None:
            watchdog.start()
        if profile is not None:
            profile.enable()
        while not stop.requested and rclpy.ok():  # a signal is seen within poll_s
            executor.spin_once(timeout_sec=poll_s)
            beat()
    except ExternalShutdownException:
        pass
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.environ[PROFILE_ENV])
        if watchdog is not None:
            watchdog.stop()
        executor.remove_node(node)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        stop.restore()
        faulthandler.cancel_dump_traceback_later()  # the watchdog's backstop: the teardown is done
    return 0
