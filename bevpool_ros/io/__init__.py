"""Every array <-> message codec: CameraTensor/Tensor (``tensor_codec``), sensor_msgs/Image and depth
images (``image_codec``, ``depth_image``), BevFeature and stamps (``bev_message``). No node logic."""
