"""No dead names in bevpool_ros. vulture (pinned in requirements.txt) reads the package, the
tests, the benchmarks and the scripts, so a name only they use counts as used; a name used where
vulture cannot see (TensorRT or rclpy calling it, a record read back as a dict) is listed, with
why, in dead_code_whitelist.py beside this file."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "bevpool_ros"


def test_nothing_in_the_package_is_unused():
    vulture = pytest.importorskip("vulture")
    v = vulture.Vulture()
    v.scavenge([str(REPO / d) for d in ("bevpool_ros", "test", "bench", "scripts")])
    # 60: vulture's level for unused functions, classes, methods, attributes and variables
    dead = [item.get_report() for item in v.get_unused_code(min_confidence=60)
            if Path(item.filename).resolve().is_relative_to(PACKAGE)]
    assert not dead, ("unused in bevpool_ros: delete it, or name it in test/dead_code_whitelist.py "
                      "with why\n" + "\n".join(dead))
