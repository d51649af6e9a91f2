"""bevpool_node's parameters on the node: declaration from ``params.PARAMS``, the run-time
rules (validate, apply, every rejection counted with a reason naming the parameter).

Configure-time parameters (``Param.read_only``: rig, backend, topics, QoS, ...) are read by the
``configure`` transition. They may change only while the node is unconfigured (a lifecycle
manager's cleanup -> set -> configure); while configured a change is rejected as read-only.
"""
from __future__ import annotations

from rcl_interfaces.msg import ParameterDescriptor, ParameterType, SetParametersResult

from ..logtext import shown
from ..params import table as P
from ..params.files import ParamsFileError, given_in_files
from ..params.names import nearest, unknown_reason
from ..ros.parameters import (
    declare,
    declare_rows,
    declared_names,
    override_names,
    type_mismatch,
    value_or_empty,
)
from .configure import StartupError, rig_file_problem

# parameters the synchroniser reads (a change re-configures it in place)
SYNC_PARAMS = ("sync.slop_s", "sync.camera_timeout_s", "sync.missing_camera_policy",
               "sync.min_cameras", "sync.max_pending_sets")
EXTRINSICS = "extrinsics."


def declare_all(node) -> None:
    """Every table parameter; an override of the wrong type or out of range is a StartupError,
    which names every other mistake of the start-up too (configured_values)."""
    errors = declare_rows(node, P.PARAMS)
    if errors:
        raise StartupError("; ".join(errors + _problems(node, node.params_files)))


def configured_values(node, params_files=()) -> dict:
    """The table's parameters as they are now; StartupError, one line, naming every mistake at
    once: a parameter the node does not have (by -p, a params file or launch: rclpy would ignore
    it without a word) or a params file none of whose node keys is this node's, each invalid
    value, and a rig_file that cannot be found. ``extrinsics.<camera>`` is checked against the
    rig at configure."""
    errors = _problems(node, params_files)
    if errors:
        raise StartupError("; ".join(errors))
    return {spec.name: value_or_empty(node, spec.name) for spec in P.PARAMS}


def _problems(node, params_files) -> list[str]:
    """Unknown names first (a misspelt name explains what follows), then the declared values'."""
    fqn = node.get_fully_qualified_name()
    try:
        in_files = given_in_files(params_files, fqn)
    except ParamsFileError as e:
        return [str(e)]
    names = {name: in_files.get(name, "-p") for name in override_names(node)}
    reason = unknown_reason(names, set(P.BY_NAME) | set(declared_names(node)), prefixes=(EXTRINSICS,))
    values = {spec.name: value_or_empty(node, spec.name) for spec in P.PARAMS if node.has_parameter(spec.name)}
    errors = ([reason] if reason else []) + P.check_all(values)
    if isinstance(values.get("rig_file"), str) and (problem := rig_file_problem(values["rig_file"])):
        errors.append(problem)
    return errors


def declare_extrinsics(node, calibration) -> None:
    """``extrinsics.<camera>`` overrides: [tx, ty, tz, qw, qx, qy, qz] camera->ego, [] = rig YAML.
    Declared for the cameras the node subscribes (kept across cleanup: a set value survives); one
    given at start for another camera is refused (it would be ignored)."""
    given = {n: "" for n in override_names(node) if n.startswith(EXTRINSICS)}
    reason = unknown_reason(given, map(P.extrinsics_param, calibration.camera_names))
    if reason:
        raise StartupError(reason)
    for cam in calibration.camera_names:
        name = P.extrinsics_param(cam)
        if node.has_parameter(name):
            value = value_or_empty(node, name)
        else:
            d = ParameterDescriptor(
                type=ParameterType.PARAMETER_DOUBLE_ARRAY,
                description=f"camera->ego pose of {cam}: [tx, ty, tz, qw, qx, qy, qz]; "
                            "empty = rig YAML (TF overrides both when enabled)")
            try:
                value = declare(node, name, [], d)
            except Exception as e:
                raise StartupError(f"{name}: {e}") from None
        if value:
            err = calibration.check_only_extrinsics_vector(cam, value)
            if err:
                raise StartupError(err)
            calibration.update_extrinsics_vector(cam, value)


def undeclared_reason(names: list[str]) -> str:
    """'undeclared parameter(s): x (did you mean y?)' for names the node does not have."""
    said = []
    for name in names:
        near = nearest(name, P.BY_NAME)
        said.append(shown(name) + (f" (did you mean {near}?)" if near else ""))
    return "undeclared parameter(s): " + ", ".join(said)


class RuntimeParameters:
    """The node's on-set (validate) and post-set (apply) parameter callbacks."""

    def __init__(self, node):
        self.node = node

    def validate(self, changes) -> SetParametersResult:
        node = self.node
        configured = node.cfg is not None
        proposed = dict(node.cfg) if configured else {}
        errors = []
        for p in changes:
            spec = P.BY_NAME.get(p.name)
            if p.name.startswith(EXTRINSICS):
                errors += self._extrinsics_error(p)
            elif spec is not None and spec.read_only and configured:
                errors.append(f"{p.name}: read-only while the node is configured (set it at "
                              "start-up, or cleanup -> set -> configure)")
            elif spec is not None:
                proposed[p.name] = p.value
                errors += [err] if (err := spec.check(p.value)) else []
        if configured:
            cross = P.check_all(proposed, num_cameras=len(node.cameras))
            errors += [e for e in cross if e not in errors]
        if errors:
            return SetParametersResult(successful=False, reason="; ".join(dict.fromkeys(errors)))
        return SetParametersResult(successful=True)

    def _extrinsics_error(self, p) -> list[str]:
        node = self.node
        cam = p.name.split(".", 1)[1]
        value = list(p.value or [])
        if node.calibration is None:
            return []  # checked against the rig by configure
        if cam not in node.cameras:
            return [f"{p.name}: unknown camera"]
        err = node.calibration.check_only_extrinsics_vector(cam, value) if value else None
        return [err] if err else []

    def readable_rejection(self, params, reason: str) -> str:
        """rclpy's descriptor messages ("Wrong parameter type, expected '3' got '4'") in words."""
        from rclpy.parameter import Parameter

        node = self.node
        why = []
        for p in params:
            spec = P.BY_NAME.get(p.name)
            if spec is not None and (err := spec.check(p.value)):
                why.append(err)
            elif reason.startswith("Wrong parameter type") and node.has_parameter(p.name):
                want = Parameter.Type(node.describe_parameter(p.name).type).name.lower()
                why.append(type_mismatch(p.name, want, p.type_.name.lower(), p.value))
        return "; ".join(why) or reason

    def apply(self, changes) -> None:
        node = self.node
        if node.cfg is None:
            return  # unconfigured: configure reads every value
        for p in changes:
            if p.name.startswith(EXTRINSICS) and p.value:
                camera = p.name.split(".", 1)[1]
                if node.calibration.update_extrinsics_vector(camera, list(p.value)):
                    node.report.count("calibration_changes")
            elif p.name in P.BY_NAME:
                node.cfg[p.name] = p.value
        node.reconfigure({p.name for p in changes})
