"""The node's FP8 codec is the project's one codec (bevpool_ros/fp8.py)."""
from ..fp8 import DECODE, E4M3_MAX, decode, encode, has_nan_codes, nan_mask  # noqa: F401
