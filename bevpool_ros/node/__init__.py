"""ROS 2 glue for bevpool_ros: the node, message conversion, the camera-set synchroniser.

Modules with no ROS import (``tensor_codec``'s numpy half, ``sync``, ``params``,
``calibration``, ``latency``) are testable without a ROS graph; ``node``, ``main``,
``synthetic_publisher`` and ``consumer`` need rclpy and the generated ``bevpool_msgs``.
"""
