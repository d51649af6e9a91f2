"""The camera side without ROS: complete, time-consistent camera sets (``sync``) and the live
calibration a rig takes from CameraInfo and TF (``calibration``). The node and the bag evaluation
share both, so a bag is cut into sets exactly as the node cuts the live topics."""
