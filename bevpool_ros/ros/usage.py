"""``--help`` / ``-h`` of the node executables: their usage and parameters, printed before anything
of ROS is touched (no context is made, no node starts). No ROS import here."""
from __future__ import annotations

import textwrap


def wants_help(argv) -> bool:
    """``-h`` or ``--help`` among the program's own arguments (before ``--ros-args``)."""
    own = list(argv)
    if "--ros-args" in own:
        own = own[:own.index("--ros-args")]
    return "-h" in own or "--help" in own


def usage(program: str, summary: str, rows, doc: str) -> str:
    """``rows``: (name, type, default, description) per parameter."""
    out = [f"usage: {program} [--ros-args [-p NAME:=VALUE ...] [--params-file FILE] [-r FROM:=TO ...]]",
           "", *textwrap.wrap(summary, 100), "", f"Parameters (type, default; reference: {doc}):"]
    for name, kind, default, text in rows:
        shown = "''" if default == "" else str(default).lower() if isinstance(default, bool) else default
        out.append(f"  {name} ({kind}, default {shown})")
        out += textwrap.wrap(text, 96, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out)
