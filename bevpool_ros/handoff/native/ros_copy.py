"""A ROS publisher's serialised publish from the hand-off core (ros_copy.cpp): the launcher publishes
the grid's BevHandoff to ROS from the thread that sent its datagram, without Python. The core reaches
rcl through the librcl this process loaded (rclpy's), found here in /proc/self/maps; the publisher
stays rclpy's and must outlive this object."""
from __future__ import annotations

from .core import error


def loaded_library(soname: str) -> str | None:
    """The path of ``soname`` as this process mapped it, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(maxsplit=5)[-1].strip()
                if path.rsplit("/", 1)[-1] == soname:
                    return path
    except OSError:
        pass
    return None


class RosCopyUnavailable(RuntimeError):
    """rcl cannot be reached from the core here (the caller publishes from Python)."""


class NativeRosCopy:
    def __init__(self, lib, publisher):
        """``publisher``: an rclpy Publisher (its rcl handle's address is what the core publishes on)."""
        self.lib = lib
        librcl = loaded_library("librcl.so")
        if librcl is None:
            raise RosCopyUnavailable("librcl.so is not loaded in this process")
        self.handle = lib.bp_ros_copy_new(librcl.encode(), int(publisher.handle.pointer))
        if not self.handle:
            raise RosCopyUnavailable(error(lib, "rcl not reached"))

    def publish(self, data: bytes) -> None:
        """``data``: a serialised message of the publisher's type."""
        rc = self.lib.bp_ros_copy_publish(self.handle, data, len(data))
        if rc != 0:
            raise RuntimeError(f"rcl_publish_serialized_message returned {rc}")

    def close(self) -> None:
        if self.handle:
            self.lib.bp_ros_copy_free(self.handle)
            self.handle = None
