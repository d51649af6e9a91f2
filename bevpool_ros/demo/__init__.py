"""Tooling around bevpool_node, not part of it: the demo, benchmarks and tests drive the node with these.

  synthetic_publisher   per-camera depth/feature Tensors + CameraInfo from a synthetic scene
  consumer              a downstream BEV/image/diagnostics subscriber that decodes from the message alone
  session               one pipeline run: the node in a child process, publisher + consumer here
"""
