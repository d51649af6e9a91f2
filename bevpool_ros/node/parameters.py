"""bevpool_node's parameters on the node: declaration from ``params.PARAMS``, the run-time
rules (validate, apply, every rejection counted with a reason naming the parameter).

Configure-time parameters (``Param.read_only``: rig, backend, topics, QoS, ...) are read by the
``configure`` transition. They may change only while the node is unconfigured (a lifecycle
manager's cleanup -> set -> configure); while configured a change is rejected as read-only.
"""
from __future__ import annotations

import difflib

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)

from ..logtext import shown
from ..params import table as P
from .configure import StartupError

_PTYPE = {"bool": ParameterType.PARAMETER_BOOL, "integer": ParameterType.PARAMETER_INTEGER,
          "double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING,
          "string_array": ParameterType.PARAMETER_STRING_ARRAY}
# parameters the synchroniser reads (a change re-configures it in place)
SYNC_PARAMS = ("sync.slop_s", "sync.camera_timeout_s", "sync.missing_camera_policy",
               "sync.min_cameras", "sync.max_pending_sets")
EXTRINSICS = "extrinsics."


def descriptor(spec: P.Param) -> ParameterDescriptor:
    """The ROS descriptor of a table entry. Configure-time parameters are not read_only for
    rclpy (they change between cleanup and configure); the node's own rule refuses them."""
    d = ParameterDescriptor(type=_PTYPE[spec.type], description=spec.description)
    if spec.read_only:
        d.additional_constraints = "configure-time: set it at start-up or while unconfigured"
    if spec.choices:
        choices = "one of: " + ", ".join(map(str, spec.choices))
        d.additional_constraints = "; ".join(filter(None, (d.additional_constraints, choices)))
    if spec.type == "double" and spec.low is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(spec.low),
                                                     to_value=float(spec.high), step=0.0)]
    if spec.type == "integer" and spec.low is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high), step=1)]
    return d


def declare(node, name: str, default, desc: ParameterDescriptor):
    """declare_parameter, except that an empty-list default keeps the descriptor's array type
    (rclpy would infer a byte array from [] and then refuse every real value)."""
    if isinstance(default, list) and not default:
        from rclpy.exceptions import ParameterUninitializedException
        from rclpy.parameter import Parameter

        kind = {ParameterType.PARAMETER_STRING_ARRAY: Parameter.Type.STRING_ARRAY,
                ParameterType.PARAMETER_DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY}[desc.type]
        node.declare_parameter(name, kind, desc)
        try:
            return list(node.get_parameter(name).value)
        except ParameterUninitializedException:
            return []
    return node.declare_parameter(name, default, desc).value


def declare_all(node) -> None:
    """Every table parameter; an override of the wrong type or out of range is a StartupError."""
    errors = []
    for spec in P.PARAMS:
        try:
            declare(node, spec.name, spec.default, descriptor(spec))
        except Exception as e:  # wrong type or out of range in the overrides: say which
            errors.append(f"{spec.name}: {e}")
    if errors:
        raise StartupError("; ".join(errors))


def _value_or_empty(node, name: str):
    """A parameter's value; [] for an array declared without a value (see declare)."""
    from rclpy.exceptions import ParameterUninitializedException

    try:
        value = node.get_parameter(name).value
    except ParameterUninitializedException:
        return []
    return list(value) if isinstance(value, (list, tuple)) else value


def current_values(node) -> dict:
    """The table's parameters as they are now; StartupError naming each invalid one."""
    values = {spec.name: _value_or_empty(node, spec.name) for spec in P.PARAMS}
    errors = P.check_all(values)
    if errors:
        raise StartupError("; ".join(errors))
    return values


def declare_extrinsics(node, calibration) -> None:
    """``extrinsics.<camera>`` overrides: [tx, ty, tz, qw, qx, qy, qz] camera->ego, [] = rig YAML.
    Declared for the configured rig's cameras (kept across cleanup: a set value survives)."""
    for cam in calibration.camera_names:
        name = P.extrinsics_param(cam)
        if node.has_parameter(name):
            value = _value_or_empty(node, name)
        else:
            d = ParameterDescriptor(
                type=ParameterType.PARAMETER_DOUBLE_ARRAY,
                description=f"camera->ego pose of {cam}: [tx, ty, tz, qw, qx, qy, qz]; "
                            "empty = rig YAML (TF overrides both when enabled)")
            node.params.declaring = True  # a declaration is not a change to log
            try:
                value = declare(node, name, [], d)
            except Exception as e:
                raise StartupError(f"{name}: {e}") from None
            finally:
                node.params.declaring = False
        if value:
            err = calibration.check_only_extrinsics_vector(cam, value)
            if err:
                raise StartupError(err)
            calibration.update_extrinsics_vector(cam, value)


def undeclared_reason(names: list[str]) -> str:
    """'undeclared parameter(s): x (did you mean y?)' for names the node does not have."""
    known = [p.name for p in P.PARAMS]
    said = []
    for name in names:
        near = difflib.get_close_matches(name, known, n=1)
        said.append(shown(name) + (f" (did you mean {near[0]}?)" if near else ""))
    return "undeclared parameter(s): " + ", ".join(said)


class RuntimeParameters:
    """The node's on-set (validate) and post-set (apply) parameter callbacks."""

    def __init__(self, node):
        self.node = node
        self.declaring = False

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
                integer = p.type_ == Parameter.Type.INTEGER
                hint = " (write 1.0, not 1)" if want == "double" and integer else ""
                got = f"{p.type_.name.lower()} {shown(p.value)}"
                why.append(f"{p.name}: expected {want}, got {got}{hint}")
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
