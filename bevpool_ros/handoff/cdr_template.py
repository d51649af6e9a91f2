"""Hand-off announcements written and read by patching a template, not field by field.

From one camera set to the next a ring's announcement (TensorHandoff, BevHandoff) changes in
a few fixed-size fields only: the stamp, the slot, the sequence, the slot's event handle (and
an E4M3 tensor's scale). rclpy (de)serialises every field through Python objects; on the
hand-off path each such step runs once per set with cold caches and costs 8-21x its warm time
(bench/cold_path.py). So, per template (every other field fixed):

  * ``CdrTemplate.encode(values)``: the serialised bytes, the template's with the varying
    fields packed in at their offsets (no message object at all);
  * ``CdrTemplate.message(data)``: a message equal to ``deserialize_message(data)``, the
    template's fields copied slot by slot and the varying ones read from ``data``.

The offsets are found, not assumed: the template is serialised by rclpy with each varying field
set to two probe values, and the bytes that differ must be exactly that field's. Then a
self-check compares encode/message with rclpy on other values; a type or layout this cannot
describe raises ``TemplateError`` and the caller keeps rclpy's path. ``TemplateReader`` picks the
template a datagram matches (every byte outside the varying fields equal) and learns one from
rclpy's result on a miss.

Making a template costs 2-4 ms (a dozen rclpy round trips): a node starting on a rig meets a dozen
new ones in its first camera set, and at 100 Hz learning them all there lost sets. With ``defer``
(``defer(job)`` runs ``job`` later, where it delays no set: the node's pooling thread after a set,
one job per set) a miss takes rclpy's path and the template is made afterwards, one per job.
Both classes load the type's rclpy support when made, not on the first message.
"""
from __future__ import annotations

import array
import struct
import threading
from collections import OrderedDict

import numpy as np

# (dotted field, struct format) of the fields that change per announcement of one ring
STAMP = (("header.stamp.sec", "i"), ("header.stamp.nanosec", "I"))
RING = (("slot", "I"), ("sequence", "Q"), ("event_handle", "64s"))
VARYING = {
    "BevHandoff": STAMP + RING,
    "TensorHandoff": STAMP + RING + (("scale", "f"),),
}
# two probe values per format whose encodings differ in every byte
_PROBES = {
    "i": (0x11223344, 0x55667788),
    "I": (0x11223344, 0x55667788),
    "Q": (0x1122334455667788, 0x0102030405060708),
    "f": (struct.unpack("<f", b"\x11\x22\x33\x44")[0], struct.unpack("<f", b"\x55\x66\x77\x48")[0]),
    "64s": (b"\x11" * 64, b"\x22" * 64),
}
_CHECKS = {  # self-check values: other than the probes
    "i": (7, -5),
    "I": (3, 4_000_000_000),
    "Q": (9, 2**63 + 5),
    "f": (0.25, 1024.0),
    "64s": (bytes(range(64)), bytes(range(100, 164))),
}


class TemplateError(ValueError):
    """A message this module cannot patch (its caller keeps rclpy's path)."""


def varying_of(msg_type) -> tuple:
    try:
        return VARYING[msg_type.__name__]
    except KeyError:
        raise TemplateError(f"{msg_type.__name__} has no template fields") from None


def _serialize(msg) -> bytes:
    from rclpy.serialization import serialize_message

    return serialize_message(msg)


def _deserialize(data: bytes, msg_type):
    from rclpy.serialization import deserialize_message

    return deserialize_message(data, msg_type)


def _with_values(msg, fields, values):
    """A copy of ``msg`` (through rclpy) with ``fields`` set to ``values`` by their setters."""
    m = _deserialize(_serialize(msg), type(msg))
    for (path, fmt), value in zip(fields, values):
        *parents, leaf = path.split(".")
        target = m
        for p in parents:
            target = getattr(target, p)
        setattr(target, leaf, np.frombuffer(value, np.uint8) if fmt.endswith("s") else value)
    return m


def _is_message(value) -> bool:
    return hasattr(type(value), "__slots__") and hasattr(type(value), "_fields_and_field_types")


def _copier(value):
    """How a field value of this kind is copied so that no later message shares it."""
    if _is_message(value):
        return clone
    if isinstance(value, np.ndarray):
        return np.copy
    if isinstance(value, array.array):
        return lambda a: array.array(a.typecode, a)
    if isinstance(value, list):
        return lambda items: [clone(v) if _is_message(v) else v for v in items]
    return None  # str, int, float, bool, bytes: immutable, shared


_plans: dict = {}  # message class -> (slots shared, (slot, copier) copied)


def clone(msg):
    """A deep copy of a ROS message, slot by slot (no constructor, no setter: rclpy's own copy
    path runs both for every field)."""
    cls = type(msg)
    plan = _plans.get(cls)
    if plan is None:
        copiers = [(name, _copier(getattr(msg, name))) for name in cls.__slots__]
        plan = _plans[cls] = (tuple(n for n, c in copiers if c is None),
                              tuple((n, c) for n, c in copiers if c is not None))
    shared, copied = plan
    new = cls.__new__(cls)
    for name in shared:
        setattr(new, name, getattr(msg, name))
    for name, copy in copied:
        setattr(new, name, copy(getattr(msg, name)))
    return new


class CdrTemplate:
    """One message's serialised form with the offsets of its ``varying`` fields."""

    def __init__(self, msg, varying=None, data: bytes | None = None):
        """``data``: ``msg`` serialised, when the caller has it (a datagram being learnt)."""
        self.msg_type = type(msg)
        self.fields = tuple(varying if varying is not None else varying_of(self.msg_type))
        try:
            self.data = bytes(data) if data is not None else _serialize(msg)
        except Exception as e:  # noqa: BLE001 - a message rclpy refuses is no template
            raise TemplateError(f"not serialisable: {e}") from None
        if self.data[:2] != b"\x00\x01":  # CDR little-endian encapsulation: the formats below
            raise TemplateError("not little-endian CDR")
        self.template = _deserialize(self.data, self.msg_type)
        if self.template != msg:
            raise TemplateError("the bytes are not this message")
        self.offsets = tuple(self._find(i) for i in range(len(self.fields)))
        self._packers = tuple(struct.Struct("<" + fmt) for _, fmt in self.fields)
        # where message() writes each value: (parent attributes, slot, a uint8 array?)
        self._targets = tuple((tuple(path.split(".")[:-1]), "_" + path.split(".")[-1], fmt.endswith("s"))
                              for path, fmt in self.fields)
        ranges = sorted((o, o + p.size) for o, p in zip(self.offsets, self._packers))
        if any(a[1] > b[0] for a, b in zip(ranges, ranges[1:])):
            raise TemplateError("varying fields overlap")
        edges = [0, *(x for r in ranges for x in r), len(self.data)]
        self._fixed = tuple((a, b) for a, b in zip(edges[::2], edges[1::2]) if b > a)
        self._fixed_bytes = tuple(self.data[a:b] for a, b in self._fixed)
        self._self_check()

    def _find(self, i: int) -> int:
        """The offset of field ``i``: where rclpy's bytes hold each of its two probe values.
        (Not a byte diff: CDR padding bytes are not initialised by the serialiser and may
        differ between two serialisations of one message.)"""
        path, fmt = self.fields[i]
        packer = struct.Struct("<" + fmt)
        base = [_CHECKS[f][0] for _, f in self.fields]
        found = None
        for probe in _PROBES[fmt]:
            values = list(base)
            values[i] = probe
            data = _serialize(_with_values(self.template, self.fields, values))
            if len(data) != len(self.data):
                raise TemplateError(f"{path}: the serialised size depends on its value")
            want = packer.pack(probe)
            at = {k for k in range(len(data) - packer.size + 1) if data[k:k + packer.size] == want}
            found = at if found is None else found & at
        if found is None or len(found) != 1:
            raise TemplateError(f"{path}: not one {packer.size}-byte field in the serialised form")
        return found.pop()

    def _self_check(self) -> None:
        """Both ways against rclpy, compared as messages (padding bytes may differ)."""
        for k in range(2):
            values = [_CHECKS[fmt][k] for _, fmt in self.fields]
            m = _with_values(self.template, self.fields, values)
            data = self.encode(values)
            if _deserialize(data, self.msg_type) != m:
                raise TemplateError("patched bytes differ from rclpy's")
            if not self.matches(data) or self.message(data) != m:
                raise TemplateError("patched message differs from rclpy's")
        if self.message(self.data) != self.template:
            raise TemplateError("patched message differs from rclpy's")

    # --- writing -----------------------------------------------------------------------------
    def encode(self, values) -> bytes:
        """The serialised message with the varying fields set to ``values`` (in ``fields`` order;
        bytes for the uint8 arrays)."""
        out = bytearray(self.data)
        for packer, offset, value in zip(self._packers, self.offsets, values):
            if type(value) is bytes and len(value) != packer.size:  # struct would pad or cut it
                raise struct.error(f"{len(value)} bytes for a {packer.size}-byte array")
            packer.pack_into(out, offset, value)
        return bytes(out)

    # --- reading -----------------------------------------------------------------------------
    def matches(self, data: bytes) -> bool:
        """``data`` is this template with other values in the varying fields only."""
        if len(data) != len(self.data):
            return False
        for (a, b), fixed in zip(self._fixed, self._fixed_bytes):
            if data[a:b] != fixed:
                return False
        return True

    def values(self, data: bytes) -> tuple:
        return tuple(p.unpack_from(data, o)[0] for p, o in zip(self._packers, self.offsets))

    def message(self, data: bytes):
        """A new message equal to ``deserialize_message(data)`` (``data`` must match)."""
        return self.message_with(self.values(data))

    def message_with(self, values):
        """A new message: the template with the varying fields set to ``values`` (``fields`` order,
        bytes for the uint8 arrays), as the core reads them from a datagram."""
        m = clone(self.template)
        for (parents, slot, is_array), value in zip(self._targets, values):
            target = m
            for p in parents:
                target = getattr(target, p)
            setattr(target, slot, np.frombuffer(value, np.uint8).copy() if is_array else value)
        return m


def load_type_support(msg_type) -> None:
    """rclpy loads a type's (de)serialisation support on first use (milliseconds): now."""
    _deserialize(_serialize(msg_type()), msg_type)


class TemplateReader:
    """``deserialize(data)`` of one announcement type: through a learnt template when ``data``
    matches one, else rclpy (and a template learnt from its result: now, or through ``defer``)."""

    KEPT = 64           # templates (a node reads 2 per camera; a consumer one per producer ring)
    GIVE_UP_AFTER = 64  # templates learnt while fewer datagrams matched one: stop learning
    REFUSED_MAX = 8     # messages no template could be made of: stop learning
    PENDING_MAX = 64    # misses waiting for a deferred job (older ones are forgotten)

    def __init__(self, msg_type, defer=None, native=None):
        """``native``: a template store of the core (native.templates.NativeTemplates) that keeps
        every template learnt here too, so the core reads datagrams by them (``message_of``)."""
        self.msg_type = msg_type
        self.fields = varying_of(msg_type)
        self.defer = defer
        self.native = native
        self._by_native_id: dict[int, CdrTemplate] = {}
        self._templates: OrderedDict[int, list[CdrTemplate]] = OrderedDict()  # by length
        self.hits = self.misses = self.learnt = self.refused = 0
        self.learning = True
        self._lock = threading.Lock()  # a consumer may read several producers' links at once
        self._pending: OrderedDict[bytes, object] = OrderedDict()  # missed data -> its message
        self._job_queued = False
        load_type_support(msg_type)

    def deserialize(self, data: bytes):
        with self._lock:
            t = self._matching(data)
            if t is not None:
                self.hits += 1
                return t.message(data)
        msg = _deserialize(data, self.msg_type)  # raises what rclpy raises on bad bytes
        schedule = False
        with self._lock:
            self.misses += 1
            if self.learning and self.defer is None:
                self._learn(self._make(msg, data), data)
            elif self.learning:
                self._pending[data] = msg
                while len(self._pending) > self.PENDING_MAX:
                    self._pending.popitem(last=False)
                schedule, self._job_queued = not self._job_queued, True
        if schedule:
            self.defer(self._learn_one)
        return msg

    def message_of(self, native_id: int, values):
        """The message of a datagram the core read through template ``native_id`` (``values`` in
        ``fields`` order); None when that template is gone meanwhile (read the bytes instead)."""
        with self._lock:
            t = self._by_native_id.get(native_id)
            if t is None:
                return None
            self.hits += 1
        return t.message_with(values[:len(self.fields)])

    def _matching(self, data: bytes) -> CdrTemplate | None:
        """(lock held)"""
        for t in self._templates.get(len(data), ()):
            if t.matches(data):
                return t
        return None

    def _learn_one(self) -> None:
        """The deferred job: one template from the oldest miss no template reads yet; queued
        again while misses wait."""
        with self._lock:
            msg = data = None
            while self._pending:
                d, m = self._pending.popitem(last=False)
                if self._matching(d) is None:
                    msg, data = m, d
                    break
        if data is not None:
            made = self._make(msg, data)  # the milliseconds: not under the lock
            with self._lock:
                if self.learning and self._matching(data) is None:
                    self._learn(made, data)
        with self._lock:
            for d in [d for d in self._pending if self._matching(d) is not None]:
                del self._pending[d]  # read by what was just learnt
            again = self._job_queued = bool(self._pending) and self.learning
        if again:
            self.defer(self._learn_one)

    def _make(self, msg, data: bytes) -> CdrTemplate | None:
        try:
            return CdrTemplate(msg, self.fields, data)
        except TemplateError:
            return None

    def _learn(self, t: CdrTemplate | None, data: bytes) -> None:
        """(lock held) Keep ``t``, the template of ``data`` (None: none could be made)."""
        if t is None:
            self.refused += 1  # a type or layout that cannot be patched: rclpy from now on
            self.learning = self.refused < self.REFUSED_MAX
            return
        self.learnt += 1
        if self.learnt > self.GIVE_UP_AFTER and self.hits < self.learnt:
            self.learning = False  # announcements that never repeat: learning only costs
        self._templates.setdefault(len(data), []).insert(0, t)
        if self.native is not None:
            try:
                t.native_id = self.native.add(t)
                self._by_native_id[t.native_id] = t
            except TemplateError:  # the core refused it (or closed): datagrams of it come as bytes
                pass
        if sum(len(v) for v in self._templates.values()) > self.KEPT:
            oldest = next(iter(self._templates))
            gone = self._templates[oldest].pop()
            if not self._templates[oldest]:
                del self._templates[oldest]
            if self._by_native_id.pop(getattr(gone, "native_id", None), None) is not None:
                self.native.remove(gone.native_id)


class TemplateWriter:
    """The producer's half: ``serialize(key, build, values)`` is the bytes of ``build()`` with the
    varying fields set to ``values``; ``build`` runs (and a template is made) only for a ``key``
    not seen before. ``key`` must name everything ``build`` puts in the other fields."""

    KEPT = 64

    def __init__(self, msg_type, defer=None):
        self.fields = varying_of(msg_type)
        self.defer = defer
        self._templates: OrderedDict = OrderedDict()  # key -> CdrTemplate, or None: rclpy's path
        self._making: set = set()  # keys whose template a deferred job makes
        self.refused = ""  # why a template could not be made (rclpy serialises those keys)
        self._lock = threading.Lock()  # a producer may publish its cameras from several threads
        load_type_support(msg_type)

    def template(self, key, build) -> CdrTemplate | None:
        """The template of ``key`` (made now from ``build()`` if new; None: rclpy's path for it)."""
        with self._lock:
            t = self._templates.get(key, False)
            if t is False:
                t = self._keep(key, self._make(build))
        return t

    def serialize(self, key, build, values) -> bytes:
        schedule = False
        with self._lock:
            t = self._templates.get(key, False)
            if t is False and self.defer is None:
                t = self._keep(key, self._make(build))
            elif t is False:
                t, schedule = None, key not in self._making
                self._making.add(key)
        if schedule:
            self.defer(lambda: self._make_later(key, build))
        if t is None:
            return _serialize(_with_values(build(), self.fields, values))
        return t.encode(values)

    def _keep(self, key, t: CdrTemplate | None) -> CdrTemplate | None:
        """(lock held)"""
        self._templates[key] = t
        while len(self._templates) > self.KEPT:
            self._templates.popitem(last=False)
        return t

    def _make_later(self, key, build) -> None:
        t = self._make(build)  # the milliseconds: not under the lock
        with self._lock:
            self._making.discard(key)
            self._keep(key, t)

    def _make(self, build) -> CdrTemplate | None:
        try:
            return CdrTemplate(build(), self.fields)
        except TemplateError as e:
            self.refused = str(e)
            return None
