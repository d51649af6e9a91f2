"""Declaring a node's parameters from rows of a parameter table (anything with name, type,
default, description, choices, low, high, read_only: ``params.table.Param``), with descriptors that
carry the types and ranges. rcl_interfaces and rclpy are imported only when called."""
from __future__ import annotations

from ..logtext import shown


def descriptor(spec):
    """The ROS descriptor of a table row. Configure-time rows are not read_only for rclpy (they
    change between a lifecycle node's cleanup and configure); the node's own rule refuses them."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType

    kind = {"bool": ParameterType.PARAMETER_BOOL, "integer": ParameterType.PARAMETER_INTEGER,
            "double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING,
            "string_array": ParameterType.PARAMETER_STRING_ARRAY}[spec.type]
    d = ParameterDescriptor(type=kind, description=spec.description)
    if spec.read_only:
        d.additional_constraints = "configure-time: set it at start-up or while unconfigured"
    if spec.choices:
        choices = "one of: " + ", ".join(map(str, spec.choices))
        d.additional_constraints = "; ".join(filter(None, (d.additional_constraints, choices)))
    if spec.low is not None and spec.high is not None:  # one-sided ranges: the table's check
        if spec.type == "double":
            d.floating_point_range = [FloatingPointRange(from_value=float(spec.low),
                                                         to_value=float(spec.high), step=0.0)]
        elif spec.type == "integer":
            d.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high), step=1)]
    return d


def declare(node, name: str, default, desc):
    """declare_parameter, except that an empty-list default keeps the descriptor's array type
    (rclpy would infer a byte array from [] and then refuse every real value)."""
    if isinstance(default, list) and not default:
        from rcl_interfaces.msg import ParameterType
        from rclpy.parameter import Parameter

        kind = {ParameterType.PARAMETER_STRING_ARRAY: Parameter.Type.STRING_ARRAY,
                ParameterType.PARAMETER_DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY}[desc.type]
        node.declare_parameter(name, kind, desc)
        return value_or_empty(node, name)
    return node.declare_parameter(name, default, desc).value


def declare_rows(node, rows) -> list[str]:
    """Every row declared; one message per override of the wrong type or out of range, in the
    table's words (``refused``), every one of them (a refused row stays undeclared)."""
    errors = []
    overrides = getattr(node, "_parameter_overrides", {})
    for spec in rows:
        try:
            declare(node, spec.name, spec.default, descriptor(spec))
        except Exception as e:  # rclpy's type/range refusal of an override: say which
            given = overrides.get(spec.name)
            errors.append(refused(spec, given) if given is not None else f"{spec.name}: {e}")
    return errors


def refused(spec, given) -> str:
    """Why a table row refuses the rclpy Parameter ``given``: its range or choice rule, or the
    type it wants, with how to write it (rclpy's own text names types in capitals, repeats the
    name and gives no hint)."""
    got = given.type_.name.lower()
    if got == spec.type:
        return spec.check(given.value) or f"{spec.name}: {shown(given.value)} refused"
    return type_mismatch(spec.name, spec.type, got, given.value)


def type_mismatch(name: str, want: str, got: str, value) -> str:
    """'sync.slop_s: expected double (write 1.0, not 1), got integer 1'."""
    hint = f" (write {float(value)!r}, not {value})" if want == "double" and got == "integer" else ""
    return f"{name}: expected {want}{hint}, got {got} {shown(value)}"


def value_or_empty(node, name: str):
    """A parameter's value; [] for an array declared without a value (see declare)."""
    from rclpy.exceptions import ParameterUninitializedException

    try:
        value = node.get_parameter(name).value
    except ParameterUninitializedException:
        return []
    return list(value) if isinstance(value, (list, tuple)) else value


def override_names(node) -> list[str]:
    """The parameter names given to ``node`` at start (-p, params files, parameter_overrides=),
    as rclpy matched them to this node; rclpy keeps them in ``_parameter_overrides`` only."""
    return list(getattr(node, "_parameter_overrides", {}))


def declared_names(node) -> list[str]:
    """Every parameter ``node`` has declared, rclpy's own (use_sim_time, ...) included."""
    return list(getattr(node, "_parameters", {}))
