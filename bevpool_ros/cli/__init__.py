"""Command-line entry points (bevpool-inspect, bevpool-bench, bevpool-demo)."""
