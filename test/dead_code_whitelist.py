"""Names of bevpool_ros that vulture (test/test_dead_code.py) reports as unused but that are used
where it cannot see: by TensorRT, rclpy, ctypes or the driver through their APIs, as record fields
read back as dicts, or by a test's subprocess script. Each use is an attribute of ``_``."""

_ = object()

# module __getattr__: the lazy imports of the package, backends.gpu and handoff
_.__getattr__
# ctypes structures and driver / TensorRT / ROS structures filled in by attribute
_._fields_
_.requestedHandleTypes
_.num_compute_capabilities
_.distortion_model
_.map_load_time
_.floating_point_range
_.integer_range
# the Python TensorRT plugin (IPluginV3 and its creator): TensorRT calls these, with these arguments
_.plugin_name
_.plugin_namespace
_.field_names
_.get_capability_interface
_.capability_type
_.get_output_data_types
_.input_types
_.get_output_shapes
_.shape_inputs
_.get_workspace_size
_.get_valid_tactics
_.set_tactic
_.tactic
_.input_desc
_.output_desc
_.workspace
_.INT8  # standin.py mirrors TensorRT's PluginFieldType
# rclpy's lifecycle transitions
_.on_configure
_.on_cleanup
_.on_shutdown
_.on_error
# __exit__(self, exc_type, exc, tb)
_.exc
# a subscription kept alive by holding it
_.image_sub
# record fields: written to JSON / keyed files, read back as dicts
_.fp8_max_abs_err
_.kernel_sources
_.bag_sets
_.lost_stamps
_.domain_held  # bag/evaluate.py EvalReport: report.json's claim -> release of the task's DDS domain
# read by a test's subprocess script (test_handoff_input.py, test_tensorrt_import.py, test_colcon_install.py)
_.sent_tensors
_.handed_off
_.libfix
_.shipped_data
# rclpy's CallbackGroup interface, called by rclpy's executors (ros/subscription_thread.py)
_.beginning_execution
_.ending_execution
# read by name by the watchdog (ros/liveness.py: getattr, a node may have no hand-off set loop)
_.handoff_thread
