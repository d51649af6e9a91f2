"""Input size limit enforced by Fast DDS, before a sample is reassembled or allocated.

Fast DDS refuses a sample larger than its reader's history payload size only under the
PREALLOCATED memory policy, and that size comes from the message type's largest serialized
size: the input type ``bevpool_msgs/CameraTensor`` is fully bounded for this (``data`` at most
``TENSOR_BOUND_BYTES``). The policy is set per topic by a ``<data_reader>`` profile named after
the fully qualified topic, and rmw_fastrtps reads it only under ``RMW_FASTRTPS_USE_QOS_FROM_XML=1``
(otherwise it forces PREALLOCATED_WITH_REALLOC, which allocates whatever size arrives).

Profiles are read once, when the process creates its DDS participant, but the node's topics are
known only after its parameters are read. So the first start computes them, writes a profile
(the shipped transport profile + one reader profile per input topic) and re-executes itself
with it; :func:`is_guarded` then holds and the node starts for real. The first start runs with
discovery off, so no peer ever sees it (node/main.py). No ROS import here.

Opt-in (``BEVPOOL_DDS_GUARD=1``): under floods of fragmented samples from several producers that
come and go, a topic's PREALLOCATED payload pool ran dry for good (camera streams went silent after
the 3rd 20 s flood with the EventsExecutor; in the 3rd to 5th flood of three earlier runs; re-creating
the subscription did not bring it back, the pool is the participant's), while the default DYNAMIC
readers pass every flood. A node that goes silent is worse than one that holds an oversized sample
(docs/ros_interface.md, "Memory"), so the guard is off unless asked for.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from xml.sax.saxutils import quoteattr

TENSOR_BOUND_BYTES = 16 << 20   # msg/CameraTensor.msg: uint8[<=16777216] data
GUARD_ENV = "BEVPOOL_DDS_GUARDED"        # key of the topics + depth the loaded profile covers
RESTARTED_ENV = "BEVPOOL_DDS_RESTARTED"  # set across the one re-execution (no loops)
FAST_RMWS = ("", "rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")


def uses_fast_dds() -> bool:
    """This process's middleware is rmw_fastrtps (ROS 2's default when none is named)."""
    return os.environ.get("RMW_IMPLEMENTATION", "") in FAST_RMWS


def guard_key(topics, depth: int) -> str:
    return hashlib.sha256(repr((sorted(topics), int(depth), TENSOR_BOUND_BYTES)).encode()).hexdigest()[:16]


def is_guarded(topics, depth: int) -> bool:
    """The running process loaded a profile bounding exactly these input topics."""
    return (os.environ.get(GUARD_ENV) == guard_key(topics, depth)
            and os.environ.get("RMW_FASTRTPS_USE_QOS_FROM_XML") == "1")


def reader_profile(topic: str, depth: int) -> str:
    """PREALLOCATED history of ``depth`` samples (ROS KEEP_LAST depth still applies on top),
    two max-size buffers allocated up front (allocated + extra; Fast DDS's default would be
    100 x 16 MiB); buffers are fixed-size, so a larger sample is refused."""
    return f"""  <data_reader profile_name={quoteattr(topic)}>
    <topic>
      <resourceLimitsQos>
        <max_samples>{depth}</max_samples>
        <max_instances>1</max_instances>
        <max_samples_per_instance>{depth}</max_samples_per_instance>
        <allocated_samples>1</allocated_samples>
        <extra_samples>1</extra_samples>
      </resourceLimitsQos>
    </topic>
    <qos><data_sharing><kind>OFF</kind></data_sharing></qos>
    <historyMemoryPolicy>PREALLOCATED</historyMemoryPolicy>
  </data_reader>
"""


def guarded_profile(base_xml: str, topics, depth: int) -> str:
    """``base_xml`` (a Fast DDS <profiles> document) plus one reader profile per topic."""
    end = base_xml.rindex("</profiles>")
    readers = "".join(reader_profile(t, depth) for t in sorted(topics))
    return base_xml[:end] + "  <!-- bevpool_node input topics: size-bounded readers (ros/dds_guard.py) -->\n" \
        + readers + base_xml[end:]


def unavailable_reason(base_profile: str | None) -> str | None:
    """Why the guard cannot be set up in this process (None: it can)."""
    rmw = os.environ.get("RMW_IMPLEMENTATION", "")
    if os.environ.get("BEVPOOL_DDS_GUARD") != "1":
        return "off unless BEVPOOL_DDS_GUARD=1"
    if not uses_fast_dds():
        return f"RMW_IMPLEMENTATION={rmw} is not Fast DDS"
    if base_profile is None:
        return ("a Fast DDS profile is configured outside bevpool_node (FASTDDS_DEFAULT_PROFILES_FILE or "
                "BEVPOOL_DDS_PROFILE=0): add its input reader profiles there (docs/ros_interface.md)")
    if os.environ.get(RESTARTED_ENV):
        return "the re-started process still does not match its profile"
    return None


def restart_environment(base_profile: str, topics, depth: int, directory: Path) -> dict | None:
    """Write the guarded profile into ``directory`` (private) and return the environment to
    re-execute with; None when the file cannot be written."""
    from ..private_cache import write_private

    xml = guarded_profile(Path(base_profile).read_text(), topics, depth)
    path = Path(directory) / f"fastdds_bevpool_node_{guard_key(topics, depth)}.xml"
    if not write_private(path, xml.encode(), "Fast DDS profile"):
        return None
    return {"FASTDDS_DEFAULT_PROFILES_FILE": str(path), "RMW_FASTRTPS_USE_QOS_FROM_XML": "1",
            GUARD_ENV: guard_key(topics, depth), RESTARTED_ENV: "1"}
