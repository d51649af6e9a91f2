"""Entry point of ``bevpool_node`` (console script and ``ros2 run bevpool_ros bevpool_node``)."""
from __future__ import annotations

import os
import sys

PROFILE_VARS = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


def use_large_data_profile() -> str | None:
    """Point Fast DDS at config/dds/fastdds_large_data.xml unless a profile is configured.

    Must run before rclpy.init. Opt out with BEVPOOL_DDS_PROFILE=0; another RMW ignores it.
    """
    if os.environ.get("BEVPOOL_DDS_PROFILE", "1") == "0" or any(os.environ.get(v) for v in PROFILE_VARS):
        return None
    if os.path.exists("DEFAULT_FASTDDS_PROFILES.xml") or os.path.exists("DEFAULT_FASTRTPS_PROFILES.xml"):
        return None
    from ..paths import config_dir

    path = config_dir() / "dds" / "fastdds_large_data.xml"
    if path.is_file():
        os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(path)
        return str(path)
    return None


def main(argv=None) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from .node import BevPoolNode, StartupError

    use_large_data_profile()
    rclpy.init(args=argv if argv is not None else sys.argv)
    try:
        node = BevPoolNode()
    except StartupError as e:
        print(f"bevpool_node: invalid configuration: {e}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    except KeyboardInterrupt:  # Ctrl-C while starting up is a clean stop too
        rclpy.try_shutdown()
        return 0
    executor = None
    try:
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if executor is not None:
            executor.remove_node(node)
            executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
