"""rosbag2 replay evaluation without rosbag2: record, inspect, play and evaluate bags (rosbags)."""
