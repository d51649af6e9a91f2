"""bevpool_node, the ROS 2 node (docs/ros_interface.md is the contract); one job per module.

No ROS import, testable alone:
  configure           what the configure transition builds: rig, depth-image converters, backend
  pooling             the pooling thread: set -> per-camera tensors -> backend.pool_cameras
  latency             rolling percentiles of the node's stages
With rclpy and the generated messages:
  node, main          the managed lifecycle node and its entry point (``bevpool_node``)
  parameters          declaration from the parameter table (bevpool_ros.params) and the run-time rules
  inputs              subscriptions, input checks, CameraInfo/TF, hand-over to the pooling thread
  handoff_input       camera tensors in through the same-host GPU hand-off
  publishing, handoff_output   BevFeature, image and GPU hand-off out (dtype from the pooled grid)
  reporting           counters, throttled drop logs, /diagnostics
  graph_watch         publishers DDS never delivers on the input topics (wrong type, incompatible QoS),
                      and publishers that left them
  reader_renewal      an input tensor reader re-made after a publisher left its topic (memory back)
  memory              the memory ceiling stated from the parameters
Below it: camera sets and live calibration (bevpool_ros.cameras), generic ROS helpers
(bevpool_ros.ros), the codecs (bevpool_ros.io). Nothing outside this folder and the command-line
entry points imports it; the demo / benchmark / test counterparts live in bevpool_ros.demo.
"""
