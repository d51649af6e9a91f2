"""A template store in the core: the CDR bytes and field offsets of cdr_template.CdrTemplate, so
that the core writes a producer's announcements (bp_ring_publish_set) and reads a consumer's
datagrams (bp_waiter_wait) without Python. One behaviour, two implementations: a template added
here encodes and reads exactly as the CdrTemplate it came from (test_cdr_template.py)."""
from __future__ import annotations

import ctypes
import struct
import threading

from ..cdr_template import TemplateError
from .core import Values, error

# the core's field roles (bevpool_handoff.h bp_role), named as cdr_template.VARYING names them
ROLES = ("header.stamp.sec", "header.stamp.nanosec", "slot", "sequence", "event_handle", "scale")


def values_struct(fields, values) -> Values:
    """``values`` in ``fields`` order (cdr_template's) as the core's struct; a value out of its
    field's range raises struct.error, as CdrTemplate.encode does (ctypes would wrap it)."""
    v = Values(scale=1.0)
    for (path, fmt), value in zip(fields, values):
        packed = struct.pack("<" + fmt, value)
        if fmt.endswith("s") and len(value) != len(packed):  # struct would pad or cut it
            raise struct.error(f"{len(value)} bytes for a {len(packed)}-byte array")
        ctypes.memmove(ctypes.addressof(v) + getattr(Values, path.rsplit(".", 1)[-1]).offset, packed, len(packed))
    return v


class NativeTemplates:
    def __init__(self, lib):
        self.lib = lib
        self.handle = lib.bp_templates_new()
        self.lengths: dict[int, int] = {}  # id -> its announcement's length
        self._lock = threading.Lock()  # a template may be learnt in one thread while another closes

    def add(self, t) -> int:
        """Keep CdrTemplate ``t``; its id in the core."""
        offsets = (ctypes.c_int32 * len(ROLES))(*([-1] * len(ROLES)))
        for (path, _), offset in zip(t.fields, t.offsets):
            offsets[ROLES.index(path)] = offset
        ring_id = int(getattr(t.template, "ring_id", 0))
        with self._lock:
            if not self.handle:
                raise TemplateError("the core's templates are closed")
            tid = self.lib.bp_templates_add(self.handle, t.data, len(t.data), offsets, ring_id)
            if tid < 0:
                raise TemplateError(error(self.lib, "template refused by the core"))
            self.lengths[tid] = len(t.data)
        return tid

    def remove(self, tid: int) -> None:
        with self._lock:
            if self.handle:
                self.lib.bp_templates_remove(self.handle, tid)
            self.lengths.pop(tid, None)

    def encode(self, tid: int, fields, values) -> bytes:
        """The bytes of template ``tid`` with ``values`` (in ``fields`` order) written in."""
        out = ctypes.create_string_buffer(self.lengths[tid])
        n = self.lib.bp_templates_encode(self.handle, tid, ctypes.byref(values_struct(fields, values)), out, len(out))
        if n < 0:
            raise TemplateError(error(self.lib, "template not encoded"))
        return out.raw[:n]

    def read(self, data: bytes) -> tuple[int, tuple] | None:
        """(template id, values in VARYING order) of the template ``data`` matches; None: none does."""
        v = Values()
        tid = self.lib.bp_templates_read(self.handle, data, len(data), ctypes.byref(v))
        return None if tid < 0 else (tid, v.as_tuple())

    def close(self) -> None:
        with self._lock:
            if self.handle:
                self.lib.bp_templates_free(self.handle)
                self.handle = None
