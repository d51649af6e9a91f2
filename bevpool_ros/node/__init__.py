"""ROS 2 glue for bevpool_ros (docs/ros_interface.md is the contract).

No ROS import, testable alone:
  tensor_codec        numpy <-> bevpool_msgs/Tensor, CameraTensor (zero-copy reads, size checks first)
  sync                camera-set synchroniser (slop, timeout, missing-camera policy, counters)
  params              every parameter: type, default, range, description, validation
  calibration         rig YAML + CameraInfo + TF/parameter extrinsics, versioned
  pooling             the pooling thread: set -> stacked tensors -> backend.pool
  latency, throttle, diagnostics   rolling percentiles, throttled logs, DiagnosticArray + its level
  logtext             input-derived text cut short before it reaches a log line
  dds_guard           the Fast DDS profile that refuses oversized input samples before reassembly
With rclpy and the generated messages:
  node, main          bevpool_node (``bevpool_node`` console script)
  outputs, qos        BevFeature / Image messages, QoS profiles
The demo / benchmark / test counterparts (publisher, consumer, session) live in bevpool_ros.demo.
"""
