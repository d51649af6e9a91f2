"""ROS 2 glue for bevpool_ros (docs/ros_interface.md is the contract).

No ROS import, testable alone:
  sync                camera-set synchroniser (slop, timeout, missing-camera policy, confirmed
                      clock resets, counters)
  params              every parameter: type, default, range, description, validation
  calibration         rig YAML + CameraInfo + TF/parameter extrinsics, versioned
  configure           what the configure transition builds: rig, depth-image converters, backend
  pooling             the pooling thread: set -> per-camera tensors -> backend.pool_cameras
  latency, throttle, diagnostics   rolling percentiles, throttled logs, DiagnosticArray + its level
  dds_guard           the Fast DDS profile that refuses oversized input samples before reassembly
  liveness            the watchdog: a stuck executor or pooling thread ends the process (code 70)
  stderr_filter       the middleware's per-sample stderr lines, throttled and counted
  housekeeping        periodic jobs: executor timers adopted between sets, the /diagnostics thread
With rclpy and the generated messages:
  node, main          bevpool_node, a managed lifecycle node (``bevpool_node`` console script)
  parameters          declaration and the run-time parameter rules
  inputs              subscriptions, input checks, CameraInfo/TF, hand-over to the pooling thread
  publishing          BevFeature, image and GPU hand-off out (dtype from the pooled grid)
  reporting           counters, throttled drop logs, /diagnostics
  graph_watch         publishers DDS never delivers on the input topics (wrong type, incompatible QoS)
  qos                 QoS profiles
The codecs (CameraTensor, Image, BevFeature) are bevpool_ros.io.
The demo / benchmark / test counterparts (publisher, consumer, session) live in bevpool_ros.demo.
"""
