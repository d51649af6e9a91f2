"""diagnostic_msgs/DiagnosticArray for /diagnostics from a component's key/value status (the node's
level rule and drop vocabulary are its contract: node_health.py)."""
from __future__ import annotations

import math


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def diagnostic_array(stamp, name: str, hardware_id: str, level: str, message: str, values: dict):
    """One DiagnosticStatus (level 'OK' | 'WARN' | 'ERROR') holding ``values`` as key/value strings."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    status = DiagnosticStatus()
    status.level = {"OK": DiagnosticStatus.OK, "WARN": DiagnosticStatus.WARN,
                    "ERROR": DiagnosticStatus.ERROR}[level]
    status.name = name
    status.hardware_id = hardware_id
    status.message = message
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
    arr = DiagnosticArray()
    arr.header.stamp = stamp
    arr.status = [status]
    return arr


def status_values(arr) -> dict[str, str]:
    """Inverse for consumers and tests: the first status's values as a dict."""
    return {kv.key: kv.value for kv in arr.status[0].values} if arr.status else {}
