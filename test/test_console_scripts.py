"""Every console script of setup.py answers ``--help`` with its usage and exits 0, as installed
(``bevpool_node --help`` once started a node on domain 0 that blocked)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

SCRIPTS = re.findall(r'"([\w-]+) = [\w.]+:main"', (REPO / "setup.py").read_text())


def test_setup_py_lists_the_console_scripts():
    assert {"bevpool_node", "bevpool_occupancy", "bevpool-bag", "bevpool-demo"} <= set(SCRIPTS), SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_usage_and_exits_0(script):
    exe = Path(sys.executable).parent / script
    if not exe.exists():
        pytest.skip(f"{script} is not installed next to this Python (pip install -e . makes it)")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)  # a node would block
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"usage: {script}"), r.stdout[:300]
