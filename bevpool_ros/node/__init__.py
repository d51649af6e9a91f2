"""ROS 2 glue for bevpool_ros (docs/ros_interface.md is the contract).

No ROS import, testable alone:
  sync                camera-set synchroniser (slop, timeout, missing-camera policy, counters)
  params              every parameter: type, default, range, description, validation
  calibration         rig YAML + CameraInfo + TF/parameter extrinsics, versioned
  pooling             the pooling thread: set -> per-camera payloads -> backend.pool_cameras
  latency, throttle, diagnostics   rolling percentiles, throttled logs, DiagnosticArray + its level
  dds_guard           the Fast DDS profile that refuses oversized input samples before reassembly
With rclpy and the generated messages:
  node, main          bevpool_node (``bevpool_node`` console script)
  qos                 QoS profiles
The codecs (CameraTensor, Image, BevFeature) are bevpool_ros.io.
The demo / benchmark / test counterparts (publisher, consumer, session) live in bevpool_ros.demo.
"""
