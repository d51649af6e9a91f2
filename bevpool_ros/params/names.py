"""Parameter names checked like rig keys: a name a node does not have is refused with the nearest
one it does have, in one line. No ROS import here (the nodes and the bag tools share it)."""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from .table import Param


class ParameterError(ValueError):
    """Parameters a node would refuse or ignore, in one line."""


# What every rclpy node declares by itself: a params file may set these for any node.
ROS_PARAMS: tuple[Param, ...] = (
    Param("use_sim_time", "bool", False, "ROS: take time from /clock instead of the system clock."),
    Param("start_type_description_service", "bool", True, "ROS: offer the type description "
          "service (read at start only)."),
)


def nearest(name: str, valid: Iterable[str]) -> str | None:
    """The valid name closest to ``name`` (difflib), or None when none is close; a name written
    without its group (``slop_s`` for ``sync.slop_s``) is also matched by its last part."""
    valid = list(valid)
    found = difflib.get_close_matches(name, valid, n=1)
    if found:
        return found[0]
    by_leaf = {v.rsplit(".", 1)[-1]: v for v in valid}
    found = difflib.get_close_matches(name.rsplit(".", 1)[-1], list(by_leaf), n=1, cutoff=0.8)
    return by_leaf[found[0]] if found else None


def unknown_reason(names: Mapping[str, str], valid: Iterable[str], prefixes: tuple[str, ...] = ()) -> str | None:
    """One line naming every unknown name, where it was given and the nearest valid name; None
    when all are known. ``names``: name -> where it was given (a file, '-p'); ``prefixes``: name
    groups checked elsewhere (e.g. ``extrinsics.`` against the rig's cameras)."""
    valid = set(valid)
    unknown = [n for n in names if n not in valid and not n.startswith(prefixes)]
    if not unknown:
        return None
    said = []
    for name in unknown:
        near = nearest(name, valid)
        where = f"{names[name]}; " if names[name] else ""
        hint = f"did you mean '{near}'?" if near else "see --help for the parameters"
        said.append(f"'{name}' ({where}{hint})")
    return ("unknown parameter " if len(said) == 1 else "unknown parameters ") + ", ".join(said)
