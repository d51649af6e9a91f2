"""Generic ROS 2 helpers every executable and room here shares (the node, the occupancy consumer,
the demo, the bag tools, the GPU hand-off); nothing in it knows the BEV node.

  qos, throttle, diagnostics   QoS profiles, throttled logs, DiagnosticArray + its level
  executor                     the executor choice (EventsExecutor where rclpy has it)
  process                      the Fast DDS large-data profile, rclpy.init without rclpy's signal
                               handlers, the spin loop that stops on SIGINT/SIGTERM in order
  dds_guard, dds_shm           the Fast DDS profile bounding input samples; shared-memory housekeeping
  liveness, housekeeping       the watchdog (a stuck thread ends the process, code 70); periodic jobs
  stderr_filter                the middleware's per-sample stderr lines, throttled and counted
  usage                        ``--help`` of the ROS executables, printed before any ROS import
  parameters                   declaring from a parameter table, with typed, ranged descriptors
Only ``process`` and ``executor`` import rclpy, and only when called.
"""
