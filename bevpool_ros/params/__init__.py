"""The nodes' parameters as data, without ROS: the one table per node (``table``: bevpool_node,
``occupancy``: bevpool_occupancy; name, type, default, range, description, whether it changes at
run time), params files read as rcl reads them (``files``), names checked with the nearest valid
one (``names``, ``check``) and the JSON schemas generated from the tables (``schema``). The nodes
declare from the tables, ``--help`` prints them, the evaluation tools check a params file with them."""
