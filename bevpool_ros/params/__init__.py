"""The node's parameters as data, without ROS: the one table (``table``: name, type, default,
range, description, whether it changes at run time). The node declares from it, ``--help`` prints
it, and the evaluation tools check a params file against it."""
