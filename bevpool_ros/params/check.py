"""bevpool_node's parameters checked without a node, as the node will check them at start: for the
tools that start one (the bag evaluation) and must refuse before a bag is replayed. No ROS here."""
from __future__ import annotations

from typing import Any

from . import table as P
from .files import parameters_for
from .names import ROS_PARAMS, ParameterError, unknown_reason

NODE_FQN = "/bevpool_node"  # the tools start the node under its own name, in no namespace
EXTRINSICS = P.extrinsics_param("")  # per camera: the node checks them against its rig


def node_parameters(params_file: str | None, overrides: dict | None = None,
                    fqn: str = NODE_FQN) -> dict[str, Any]:
    """What node ``fqn`` gets from ``params_file`` and the ``-p`` ``overrides`` (these win), every
    name known and every value in type and range; ParameterError (one line) otherwise."""
    given = parameters_for(params_file, fqn) if params_file else {}
    where = {**dict.fromkeys(given, str(params_file)), **dict.fromkeys(overrides or {}, "-p")}
    given.update(overrides or {})
    reason = unknown_reason(where, [*P.BY_NAME, *(p.name for p in ROS_PARAMS)], prefixes=(EXTRINSICS,))
    if reason:
        raise ParameterError(reason)
    errors = [e for name, value in given.items() if (e := P.check(name, value))]
    if errors:
        raise ParameterError("; ".join(errors))
    return given
