"""Every console script of setup.py answers ``--help`` and ``-h`` with its usage and exits 0
without creating a ROS context (``bevpool_node --help`` once started a node on domain 0 that
blocked); the nodes list their parameters with types and defaults, from their tables. One
process per script checks it as installed; the rest runs ``main(argv)`` in-process."""
from __future__ import annotations

import contextlib
import importlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

ENTRY_POINTS = dict(re.findall(r'"([\w-]+) = ([\w.]+:main)"', (REPO / "setup.py").read_text()))
SCRIPTS = list(ENTRY_POINTS)
NODES = {"bevpool_node": "bevpool_ros.params.table", "bevpool_occupancy": "bevpool_ros.params.occupancy"}


def test_setup_py_lists_the_console_scripts():
    assert {"bevpool_node", "bevpool_occupancy", "bevpool-bag", "bevpool-demo"} <= set(SCRIPTS), SCRIPTS
    assert len(SCRIPTS) == (REPO / "setup.py").read_text().count(":main\""), "an entry point this test misses"


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_as_installed_prints_usage_and_exits_0(script):
    exe = Path(sys.executable).parent / script
    if not exe.exists():
        pytest.skip(f"{script} is not installed next to this Python (pip install -e . makes it)")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)  # a node would block
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith(f"usage: {script}"), r.stdout[:300]


def help_in_process(script: str, flag: str, monkeypatch) -> str:
    """``script``'s main with ``flag``: its stdout; a ROS context made on the way fails the test."""
    import rclpy.context

    def no_context(*_, **__):
        raise AssertionError(f"{script} {flag} made a ROS context")

    monkeypatch.setattr(rclpy.context.Context, "init", no_context)
    monkeypatch.setattr(sys, "argv", [script])  # as a console script runs: argparse's prog from it
    module, func = ENTRY_POINTS[script].split(":")
    main = getattr(importlib.import_module(module), func)
    argv = [script, flag] if script in NODES else [flag]  # the nodes take rclpy's argv
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's help
            rc = e.code
    assert rc in (0, None), f"{script} {flag} exited {rc}"
    return out.getvalue()


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_in_process_makes_no_ros_context(script, flag, monkeypatch):
    assert help_in_process(script, flag, monkeypatch).startswith(f"usage: {script}")


@pytest.mark.parametrize("script", sorted(NODES))
def test_node_help_lists_every_parameter_with_type_and_default(script, monkeypatch):
    text = help_in_process(script, "-h", monkeypatch)
    for p in importlib.import_module(NODES[script]).PARAMS:
        default = "''" if p.default == "" else str(p.default).lower() if isinstance(p.default, bool) else p.default
        assert f"  {p.name} ({p.type}, default {default})\n" in text, p.name
    assert "--ros-args" in text and "--params-file" in text


def test_help_after_ros_args_is_not_ours():
    """``-h`` among the ROS arguments belongs to rcl, not to the program's help."""
    from bevpool_ros.ros.usage import wants_help

    assert wants_help(["-h"]) and wants_help(["--help", "--ros-args", "-p", "a:=1"])
    assert not wants_help(["--ros-args", "-p", "x:=-h"]) and not wants_help([])
