"""Loading the hand-off core (libbevpool_handoff.so) and its C ABI (bevpool_handoff.h).

``BEVPOOL_NATIVE`` picks the implementation of the hand-off's per-tensor path: ``auto`` (the
default) the core where it is built and loads, else the Python path; ``0`` / ``off`` always Python;
``1`` / ``on`` the core or an error saying why not. A caller's own ``native=`` argument (True,
False, None: the variable) wins over it. Where the core is missing in ``auto``, one warning line
per process says why.
"""
from __future__ import annotations

import ctypes
import logging
import os
from pathlib import Path

from . import build

ENV = "BEVPOOL_NATIVE"
DEFAULT_MODE = "auto"  # the whole GPU suite passed on the core, the node's launches included (docs/gpu_handoff.md)
ABI_VERSION = 4  # bevpool_handoff.h BP_ABI_VERSION
BP_OK, BP_E_ARGUMENT = 0, -1
WAKE_SHUTDOWN, WAKE_CLOSED, WAKE_RAW, WAKE_TEMPLATE, WAKE_TIMEOUT = range(5)  # bp_wake: bp_waiter_wait's answer
READY = 2  # bp_check: the slot held the announced tensor (and its event was waited for); 0 unchecked, 1 overwritten

log = logging.getLogger(__name__)


class NativeUnavailable(RuntimeError):
    """The core was asked for (BEVPOOL_NATIVE=on, native=True) and cannot be used here."""


class Values(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int32), ("nanosec", ctypes.c_uint32), ("slot", ctypes.c_uint32),
                ("scale", ctypes.c_float), ("sequence", ctypes.c_uint64), ("event_handle", ctypes.c_uint8 * 64)]

    def as_tuple(self) -> tuple:
        """In cdr_template.VARYING's order: sec, nanosec, slot, sequence, event handle, scale."""
        return (self.sec, self.nanosec, self.slot, self.sequence, bytes(self.event_handle), self.scale)


class Item(ctypes.Structure):
    _fields_ = [("src", ctypes.c_uint64), ("nbytes", ctypes.c_uint64), ("stream", ctypes.c_uint64),
                ("template_id", ctypes.c_int32), ("scale", ctypes.c_float), ("sequence", ctypes.c_uint64),
                ("slot", ctypes.c_uint32), ("offset", ctypes.c_uint32), ("length", ctypes.c_uint32),
                ("pad", ctypes.c_uint32)]


class Arrival(ctypes.Structure):
    _fields_ = [("link", ctypes.c_uint64), ("arrival_ns", ctypes.c_int64), ("length", ctypes.c_uint32),
                ("template_id", ctypes.c_int32), ("check", ctypes.c_int32), ("pad", ctypes.c_uint32),
                ("values", Values)]


class Record(ctypes.Structure):
    """bp_record: one thing the set loop hands to Python (bp_record_kind)."""
    _fields_ = [("kind", ctypes.c_int32), ("count", ctypes.c_uint32), ("link", ctypes.c_uint64),
                ("token", ctypes.c_uint64), ("lost", ctypes.c_uint64), ("ring_id", ctypes.c_uint64),
                ("epoch", ctypes.c_int64), ("first_arrival", ctypes.c_double), ("last_arrival", ctypes.c_double),
                ("complete", ctypes.c_uint32), ("missing", ctypes.c_uint32), ("stamp", ctypes.c_int64)]


class Member(ctypes.Structure):
    """bp_member: one camera stream's message in a set."""
    _fields_ = [("camera", ctypes.c_int32), ("stream", ctypes.c_int32), ("stamp", ctypes.c_int64),
                ("token", ctypes.c_uint64), ("ring_id", ctypes.c_uint64), ("template_id", ctypes.c_int32),
                ("pad", ctypes.c_uint32), ("values", Values)]


class Launch(ctypes.Structure):
    """bp_launch: what bp_launcher_launch did with a set (bp_launch_result)."""
    _fields_ = [("result", ctypes.c_int32), ("flags", ctypes.c_uint32), ("slot", ctypes.c_uint32),
                ("length", ctypes.c_uint32), ("sequence", ctypes.c_uint64), ("member", ctypes.c_int32),
                ("ros_copy", ctypes.c_uint32), ("launched_ns", ctypes.c_int64), ("done_ns", ctypes.c_int64)]


_P, _U8P, _U64P = ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint8), ctypes.POINTER(ctypes.c_uint64)
_I32, _U32, _U64, _I64P = ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64)
PROTOTYPES = {  # name: (result, arguments)
    "bp_abi_version": (ctypes.c_int, ()),
    "bp_source_digest": (ctypes.c_char_p, ()),
    "bp_sizeof": (ctypes.c_uint32, (ctypes.c_int,)),
    "bp_last_error": (ctypes.c_char_p, ()),
    "bp_driver_available": (ctypes.c_int, ()),
    "bp_templates_new": (_P, ()),
    "bp_templates_free": (None, (_P,)),
    "bp_templates_add": (_I32, (_P, ctypes.c_char_p, _U32, ctypes.POINTER(_I32), _U64)),
    "bp_templates_remove": (ctypes.c_int, (_P, _I32)),
    "bp_templates_encode": (ctypes.c_int, (_P, _I32, ctypes.POINTER(Values), _P, _U32)),
    "bp_templates_read": (_I32, (_P, ctypes.c_char_p, _U32, ctypes.POINTER(Values))),
    "bp_fanout_new": (_P, ()),
    "bp_fanout_free": (None, (_P,)),
    "bp_fanout_add": (None, (_P, ctypes.c_int)),
    "bp_fanout_consumers": (ctypes.c_int, (_P,)),
    "bp_fanout_send": (None, (_P, ctypes.c_char_p, _U32)),
    "bp_fanout_dropped": (_U64, (_P,)),
    "bp_ring_new": (_P, (_P, _U32, _U64P, _U64, _U64P, ctypes.c_char_p)),
    "bp_ring_free": (None, (_P,)),
    "bp_ring_claim": (None, (_P, ctypes.POINTER(_U32), _U64P)),
    "bp_ring_finish": (ctypes.c_int, (_P, _U32, _U64, _U64)),
    "bp_ring_write": (ctypes.c_int, (_P, _U64, _U64, _U64, ctypes.POINTER(_U32), _U64P)),
    "bp_ring_publish_set": (ctypes.c_int, (_P, _P, _P, _I32, _U32, ctypes.POINTER(Item), _U32, _P, _U32)),
    "bp_waiter_new": (_P, (_P, ctypes.c_int)),
    "bp_waiter_free": (None, (_P,)),
    "bp_waiter_add": (ctypes.c_int, (_P, ctypes.c_int, _U64P)),
    "bp_waiter_remove": (None, (_P, _U64)),
    "bp_waiter_watch": (ctypes.c_int, (_P, _U64, _I64P, _U32, _U32, ctypes.c_char_p, _U64P, _U64)),
    "bp_waiter_unwatch": (None, (_P, _U64)),
    "bp_waiter_wait": (ctypes.c_int, (_P, ctypes.POINTER(Arrival), _P, _U32)),
    "bp_waiter_shutdown": (None, (_P,)),
    "bp_setloop_new": (_P, (ctypes.c_char_p, _U32)),
    "bp_setloop_free": (None, (_P,)),
    "bp_setloop_configure": (ctypes.c_char_p, (_P, ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int,
                                               ctypes.c_int)),
    "bp_setloop_checks": (None, (_P, ctypes.c_double, ctypes.c_int64)),
    "bp_setloop_link": (ctypes.c_int, (_P, ctypes.c_int, _U64P)),
    "bp_setloop_unlink": (None, (_P, _U64)),
    "bp_setloop_watch": (ctypes.c_int, (_P, _U64, _I64P, _U32)),
    "bp_setloop_unwatch": (None, (_P, _U64)),
    "bp_setloop_learn": (_I32, (_P, ctypes.c_char_p, _U32, ctypes.POINTER(_I32), _U64, ctypes.c_int, ctypes.c_int,
                                ctypes.c_int)),
    "bp_setloop_forget": (None, (_P, _I32)),
    "bp_setloop_claim": (ctypes.c_int, (_P, _U64, _U64, ctypes.c_int)),
    "bp_setloop_seen": (ctypes.c_int, (_P, _U64, _U64)),
    "bp_setloop_sequence": (None, (_P, _U64, _U64, _U64)),
    "bp_setloop_offer": (None, (_P, ctypes.c_int, ctypes.c_int, ctypes.c_int64, _U64, ctypes.c_double)),
    "bp_setloop_poll": (None, (_P, ctypes.c_double)),
    "bp_setloop_reset": (None, (_P,)),
    "bp_setloop_run": (ctypes.c_int, (_P, ctypes.c_int)),
    "bp_setloop_next": (ctypes.c_int, (_P, ctypes.POINTER(Record), ctypes.POINTER(Member), _U32, _P, _U32)),
    "bp_setloop_wake": (None, (_P,)),
    "bp_setloop_shutdown": (None, (_P,)),
    "bp_setloop_counts": (ctypes.c_int, (_P, _P, _U32)),
    "bp_setloop_state": (ctypes.c_int64, (_P, ctypes.c_int)),
    "bp_setloop_launch_with": (None, (_P, _P, _I64P)),
    "bp_setloop_launching_since": (ctypes.c_int64, (_P,)),
    "bp_setloop_inject_stall": (None, (_P, ctypes.c_int)),
    "bp_launcher_new": (_P, (_U64, _U64, _U64, _U64, _U64, _P, _P, _I32, ctypes.c_char_p, _U32, _P)),
    "bp_launcher_free": (None, (_P,)),
    "bp_launcher_ring": (None, (_P, _U64, _I64P, _U32, _U32, ctypes.c_char_p, _U64P)),
    "bp_launcher_unring": (None, (_P, _U64)),
    "bp_launcher_remember": (None, (_P, _U64P, _U32, _U64)),
    "bp_launcher_forget": (None, (_P, _U64P, _U32)),
    "bp_launcher_forget_all": (None, (_P,)),
    "bp_launcher_launch": (ctypes.c_int, (_P, ctypes.POINTER(Member), _U32, _I32, _U32, ctypes.POINTER(Launch), _P,
                                          _U32)),
    "bp_launcher_ros_copy": (None, (_P, _P)),
    "bp_ros_copy_new": (_P, (ctypes.c_char_p, _U64)),
    "bp_ros_copy_free": (None, (_P,)),
    "bp_ros_copy_publish": (ctypes.c_int, (_P, ctypes.c_char_p, _U32)),
    "bp_launcher_hold": (None, (_P,)),
    "bp_launcher_release": (None, (_P,)),
}

_state: dict = {}  # "lib": the loaded library or None, "why": why not, "warned"


def load(folder: Path = build.HERE):
    """(the library in ``folder``, "") or (None, why it cannot be used)."""
    path = Path(folder) / build.LIBRARY
    if not path.exists():
        return None, f"not built ({path.name} missing: python -m bevpool_ros.handoff.native.build)"
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return None, f"{path.name} does not load ({e})"
    for name, (restype, argtypes) in PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            return None, f"{path.name} has no {name}: rebuild it"
        fn.restype, fn.argtypes = restype, list(argtypes)
    if lib.bp_abi_version() != ABI_VERSION:
        return None, f"{path.name} speaks ABI {lib.bp_abi_version()}, this Python {ABI_VERSION}: rebuild it"
    want = build.digest(Path(folder))
    if want and lib.bp_source_digest().decode() != want:
        return None, f"{path.name} was built from other sources (python -m bevpool_ros.handoff.native.build)"
    structs = (Values, Item, Arrival, Record, Member, Launch)
    sizes = [lib.bp_sizeof(i) for i in range(len(structs))]
    if sizes != [ctypes.sizeof(s) for s in structs]:
        return None, f"{path.name} lays its structs out otherwise ({sizes} bytes): rebuild it"
    return lib, ""


def library():
    """The loaded core, or None (``unavailable_reason()`` says why)."""
    if "lib" not in _state:
        _state["lib"], _state["why"] = load()
    return _state["lib"]


def unavailable_reason() -> str:
    library()
    return _state["why"]


def mode() -> str:
    """``BEVPOOL_NATIVE`` as one of auto, on, off (unset, empty or an unknown value: auto)."""
    value = os.environ.get(ENV, "").strip().lower() or DEFAULT_MODE
    return {"0": "off", "off": "off", "false": "off", "1": "on", "on": "on", "true": "on"}.get(value, "auto")


def use_native(native: bool | None = None):
    """The core to use, or None for the Python path. ``native``: True must have it, False never,
    None as ``BEVPOOL_NATIVE`` says."""
    wanted = mode() if native is None else ("on" if native else "off")
    if wanted == "off":
        return None
    lib = library()
    if lib is None and wanted == "on":
        raise NativeUnavailable(f"the hand-off core is not available: {unavailable_reason()}")
    if lib is None and not _state.get("warned"):
        _state["warned"] = True
        log.warning("hand-off: native core not available (%s); the Python path runs", unavailable_reason())
    return lib


def error(lib, what: str) -> str:
    return f"{what}: {lib.bp_last_error().decode(errors='replace')}"
