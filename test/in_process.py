"""A command-line tool's ``main(argv)`` run in the test process, as its console script runs it
(issue 31: a process per error case made the suite slow). What the process would print on its
stderr is read at the descriptor (capfd: rcl writes there too), its exit status is main's return
value or the SystemExit it raised (argparse). The test process comes back as it was: environment,
GIL switch interval and signal handlers. A node that would start spinning, or re-execute itself
(the opt-in input size guard), fails the test instead of taking the test process with it.
``test/test_console_scripts.py`` runs every console script once as a real process."""
from __future__ import annotations

import importlib
import os
import signal
import sys
from dataclasses import dataclass


@dataclass
class Ran:
    rc: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:  # as subprocess.CompletedProcess
        return self.rc

    def lines(self) -> list[str]:
        """The non-empty stderr lines, without the shared-memory housekeeping line
        (ros_harness.message_lines)."""
        from ros_harness import message_lines

        return message_lines(self.stderr)


class _Started(AssertionError):
    pass


def run_main(target: str, argv: list[str], capfd, monkeypatch, ros: bool = False) -> Ran:
    """``target``: "module" or "module:function" (default function ``main``). ``ros``: the main
    may make a ROS context: a DDS domain of its own first (ros_harness.isolate_ros_env)."""
    module, _, func = target.partition(":")
    main = getattr(importlib.import_module(module), func or "main")
    environ = dict(os.environ)
    interval = sys.getswitchinterval()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if ros:
        from ros_harness import isolate_ros_env

        isolate_ros_env()
        monkeypatch.delenv("BEVPOOL_DDS_GUARD", raising=False)  # no re-execution of this process

        def started(*_, **__):
            raise _Started("the node started (spin or re-exec) where a refusal was expected")
        # node/main.py imports these at its top, bevpool_occupancy inside main (from ros/process.py)
        for name in ("bevpool_ros.ros.process", "bevpool_ros.node.main"):
            mod = importlib.import_module(name)
            for attr in ("spin_until_shutdown", "restart_with"):
                if hasattr(mod, attr):
                    monkeypatch.setattr(mod, attr, started)
    capfd.readouterr()  # what came before is not the tool's
    try:
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capfd.readouterr()
    finally:
        os.environ.clear()
        os.environ.update(environ)
        sys.setswitchinterval(interval)
        for s, h in handlers.items():
            if signal.getsignal(s) is not h and h is not None:
                signal.signal(s, h)
    return Ran(0 if rc is None else rc, out, err)
