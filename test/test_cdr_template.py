"""handoff/cdr_template.py against rclpy itself: patched bytes and patched messages must be what
rclpy's serialisation and deserialisation make of the same values, for any values and for
templates whose strings shift every later field's alignment."""
from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("bevpool_msgs.msg")
from bevpool_msgs.msg import BevHandoff, TensorHandoff  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

from bevpool_ros.handoff import cdr_template  # noqa: E402
from bevpool_ros.handoff.cdr_template import (  # noqa: E402
    CdrTemplate,
    TemplateError,
    TemplateReader,
    TemplateWriter,
    clone,
)


def tensor_handoff(camera="CAM_FRONT", frame_id="cam", socket_path="/tmp/bevpool-x/ring.sock", shape=(118, 16, 44)):
    m = TensorHandoff()
    m.header.frame_id = frame_id
    m.camera, m.stream, m.layout = camera, "depth", "DHW"
    m.socket_path, m.ring_id, m.ring_size = socket_path, 77, 36
    m.offset, m.nbytes, m.dtype = 0, int(np.prod(shape)) * 2, 8
    m.shape = list(shape)
    m.device_ordinal = 0
    m.device_uuid = np.arange(16, dtype=np.uint8)
    m.boot_id = "0b5e1d2c-1111-2222-3333-444455556666"
    return m


def bev_handoff(frame_id="ego", backend="cuda"):
    m = BevHandoff()
    m.header.frame_id = frame_id
    m.origin.x, m.origin.y, m.origin.z = -51.2, -51.2, -5.0
    m.resolution_x = m.resolution_y = 0.8
    m.resolution_z = 8.0
    m.width, m.height, m.layers, m.channels = 128, 128, 1, 80
    m.layout, m.socket_path = "ZYXC", "/tmp/bevpool-1/ring.sock"
    m.ring_id, m.ring_size, m.nbytes, m.dtype = 5, 4, 128 * 128 * 80 * 2, 8
    m.shape = [1, 128, 128, 80]
    m.device_uuid = np.arange(16, dtype=np.uint8)
    m.backend, m.precision = backend, "fp16"
    return m


def with_values(msg, values):
    """``msg`` (a copy) with the template fields set through the message's own setters."""
    m = deserialize_message(serialize_message(msg), type(msg))
    sec, nanosec, slot, sequence, event = values[:5]
    m.header.stamp.sec, m.header.stamp.nanosec = sec, nanosec
    m.slot, m.sequence = slot, sequence
    m.event_handle = np.frombuffer(event, np.uint8)
    if len(values) > 5:
        m.scale = values[5]
    return m


def float32s():
    return st.floats(width=32, allow_nan=False, allow_infinity=False)


values_common = st.tuples(
    st.integers(-2**31, 2**31 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
    st.integers(0, 2**64 - 1), st.binary(min_size=64, max_size=64))
strings = st.text(alphabet="abcXYZ_/0", max_size=9)


@settings(max_examples=60, deadline=None)
@given(values=values_common, scale=float32s(), frame_id=strings, camera=strings,
       dims=st.integers(1, 8))
def test_tensor_handoff_patched_both_ways_is_what_rclpy_makes(values, scale, frame_id, camera, dims):
    msg = tensor_handoff(camera=camera, frame_id=frame_id, shape=(3,) * dims)
    t = CdrTemplate(msg)
    vals = (*values, scale)
    want = with_values(msg, vals)
    data = t.encode(vals)
    assert deserialize_message(data, TensorHandoff) == want
    assert t.matches(data)
    assert t.message(data) == want


@settings(max_examples=40, deadline=None)
@given(values=values_common, frame_id=strings, backend=strings)
def test_bev_handoff_patched_both_ways_is_what_rclpy_makes(values, frame_id, backend):
    msg = bev_handoff(frame_id=frame_id, backend=backend)
    t = CdrTemplate(msg)
    want = with_values(msg, values)
    data = t.encode(values)
    assert deserialize_message(data, BevHandoff) == want
    assert t.message(data) == want


def test_the_offsets_follow_the_strings_before_them():
    short, long_ = CdrTemplate(tensor_handoff(camera="A")), CdrTemplate(tensor_handoff(camera="A" * 12))
    assert short.offsets[:2] == long_.offsets[:2]  # the stamp comes first
    assert long_.offsets[2] > short.offsets[2]


def test_a_patched_message_shares_nothing_mutable_with_the_next():
    t = CdrTemplate(bev_handoff())
    data = t.encode((1, 2, 3, 4, bytes(64)))
    a = t.message(data)
    a.event_handle[:] = 9
    a.device_uuid[:] = 9
    a.shape[0] = 99
    a.origin.x = 1.0
    a.header.frame_id = "changed"
    b = t.message(data)
    assert b == deserialize_message(data, BevHandoff)
    assert not b.event_handle.any() and b.shape[0] == 1 and b.origin.x == -51.2


def test_clone_is_a_deep_copy():
    m = bev_handoff()
    c = clone(m)
    assert c == m and c is not m and c.header is not m.header and c.origin is not m.origin
    assert c.device_uuid is not m.device_uuid and c.shape is not m.shape


def test_the_reader_learns_a_template_then_patches():
    producer = CdrTemplate(tensor_handoff())
    reader = TemplateReader(TensorHandoff)
    for i in range(5):
        data = producer.encode((i, 10 * i, i % 36, 100 + i, bytes([i]) * 64, 0.5))
        assert reader.deserialize(data) == deserialize_message(data, TensorHandoff)
    assert (reader.learnt, reader.misses, reader.hits) == (1, 1, 4)
    # another camera's announcements: another template
    other = CdrTemplate(tensor_handoff(camera="CAM_BACK"))
    for i in range(3):
        data = other.encode((i, 0, 1, 7 + i, bytes(64), 1.0))
        assert reader.deserialize(data).camera == "CAM_BACK"
    assert (reader.learnt, reader.hits) == (2, 6)


def test_a_deferring_reader_learns_after_the_set_one_template_per_job():
    """``defer``: a miss is read by rclpy and the template is learnt by a later job (the node's
    pooling thread after a set), one per job, queued again while misses wait; misses of one
    template before its job ran make one template, not one each."""
    jobs = []
    reader = TemplateReader(TensorHandoff, defer=jobs.append)
    front, back = CdrTemplate(tensor_handoff()), CdrTemplate(tensor_handoff(camera="CAM_BACK"))
    for i in range(3):
        for producer in (front, back):
            data = producer.encode((i, 0, i, 10 + i, bytes([i]) * 64, 1.0))
            assert reader.deserialize(data) == deserialize_message(data, TensorHandoff)
    assert len(jobs) == 1 and (reader.learnt, reader.misses, reader.hits) == (0, 6, 0)
    jobs.pop()()
    assert reader.learnt == 1 and len(jobs) == 1  # one template; the other camera's still waits
    jobs.pop()()
    assert reader.learnt == 2 and not jobs  # the rest of the misses matched the two: no third
    for producer, camera in ((front, "CAM_FRONT"), (back, "CAM_BACK")):
        data = producer.encode((9, 9, 9, 99, bytes([9]) * 64, 2.0))
        assert reader.deserialize(data) == deserialize_message(data, TensorHandoff)
        assert reader.deserialize(data).camera == camera
    assert reader.hits == 4 and not jobs


def test_a_deferring_writer_serialises_through_rclpy_until_its_job_made_the_template():
    jobs, built = [], []
    writer = TemplateWriter(BevHandoff, defer=jobs.append)

    def build():
        built.append(1)
        return bev_handoff()

    for i in range(4):
        if i == 2:
            (job,) = jobs  # one job for the key, however many sets came before it ran
            job()
            jobs.clear()
        data = writer.serialize("ego", build, (i, 7, i % 4, i + 1, bytes([i]) * 64))
        expect = with_values(bev_handoff(), (i, 7, i % 4, i + 1, bytes([i]) * 64))
        assert data == serialize_message(expect)
    # rclpy's path built the message for sets 0 and 1, the job once; sets 2 and 3 patched the template
    assert len(built) == 3 and not jobs


def test_the_reader_refuses_bad_bytes_as_rclpy_does_and_goes_on():
    producer = CdrTemplate(tensor_handoff())
    reader = TemplateReader(TensorHandoff)
    good = producer.encode((1, 2, 3, 4, bytes(64), 1.0))
    reader.deserialize(good)
    for bad in (good[:40], b"\x00\x01\x00\x00" + b"\xff" * 20, b""):
        with pytest.raises(Exception):  # noqa: B017 - whatever rclpy raises for these bytes
            deserialize_message(bad, TensorHandoff)
        with pytest.raises(Exception):  # noqa: B017
            reader.deserialize(bad)
    assert reader.deserialize(good) == deserialize_message(good, TensorHandoff)


def test_a_changed_fixed_field_is_never_patched_in():
    """A datagram equal to a template but in one fixed field (the ring id) is not that
    template's: it is read by rclpy, the value it carries kept."""
    producer = CdrTemplate(tensor_handoff())
    reader = TemplateReader(TensorHandoff)
    reader.deserialize(producer.encode((1, 2, 3, 4, bytes(64), 1.0)))
    changed = tensor_handoff()
    changed.ring_id = 78
    data = CdrTemplate(changed).encode((1, 2, 3, 5, bytes(64), 1.0))
    assert reader.deserialize(data).ring_id == 78
    assert reader.hits == 0


def test_the_writer_builds_once_per_key():
    writer = TemplateWriter(BevHandoff)
    built = []

    def build(frame_id):
        built.append(frame_id)
        return bev_handoff(frame_id=frame_id)

    for i in range(4):
        for frame in ("ego", "base_link"):
            data = writer.serialize(frame, lambda f=frame: build(f), (i, 0, i % 4, i + 1, bytes([i]) * 64))
            m = deserialize_message(data, BevHandoff)
            assert (m.header.frame_id, m.sequence, m.slot, m.event_handle[0]) == (frame, i + 1, i % 4, i)
    assert built == ["ego", "base_link"]


def test_the_writer_falls_back_to_rclpy_where_no_template_can_be_made(monkeypatch):
    def refuse(*a, **k):
        raise TemplateError("no template here")

    monkeypatch.setattr(cdr_template, "CdrTemplate", refuse)
    writer = TemplateWriter(TensorHandoff)
    for i in range(2):
        data = writer.serialize("k", tensor_handoff, (5, 6, 7, 8 + i, bytes([3]) * 64, 4.0))
        m = deserialize_message(data, TensorHandoff)
        assert (m.sequence, m.scale, m.event_handle[63], m.header.stamp.sec) == (8 + i, 4.0, 3, 5)
    assert writer.refused == "no template here"


def test_values_out_of_range_raise_instead_of_wrapping():
    t = CdrTemplate(bev_handoff())
    for bad in ((2**31, 0, 0, 0, bytes(64)), (0, -1, 0, 0, bytes(64)), (0, 0, 0, 2**64, bytes(64)),
                (0, 0, 0, 0, bytes(63)), (0, 0, 0, 0, bytes(65))):
        with pytest.raises(struct.error):
            t.encode(bad)


def test_a_type_without_template_fields_is_refused():
    from std_msgs.msg import Header

    with pytest.raises(TemplateError):
        CdrTemplate(Header())
    with pytest.raises(TemplateError):
        TemplateReader(Header)


def test_a_reader_of_announcements_that_never_repeat_stops_learning(monkeypatch):
    """Learning costs a few rclpy round trips; a stream whose fixed fields change every time (a
    new frame id per message) never matches, so after GIVE_UP_AFTER templates the reader stops
    learning and reads through rclpy, still correctly; it keeps at most KEPT templates."""
    monkeypatch.setattr(TemplateReader, "GIVE_UP_AFTER", 3)
    monkeypatch.setattr(TemplateReader, "KEPT", 2)
    reader = TemplateReader(TensorHandoff)
    for i in range(6):
        data = CdrTemplate(tensor_handoff(frame_id=f"cam{i}")).encode((i, 0, 1, i, bytes(64), 1.0))
        assert reader.deserialize(data).header.frame_id == f"cam{i}"
    assert (reader.hits, reader.misses, reader.learnt, reader.learning) == (0, 6, 4, False)
    assert sum(len(v) for v in reader._templates.values()) == 2


# --- the core's templates (handoff/native): the same bytes and values as CdrTemplate's ------------
def native_store():
    from bevpool_ros.handoff.native.core import library, unavailable_reason
    from bevpool_ros.handoff.native.templates import NativeTemplates

    lib = library()
    if lib is None:
        pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
    return NativeTemplates(lib)


@settings(max_examples=60, deadline=None)
@given(values=values_common, scale=float32s(), frame_id=strings, camera=strings, dims=st.integers(1, 8))
def test_the_core_patches_and_reads_tensor_handoffs_as_rclpy_makes_them(values, scale, frame_id, camera, dims):
    store = native_store()
    try:
        msg = tensor_handoff(camera=camera, frame_id=frame_id, shape=(3,) * dims)
        t = CdrTemplate(msg)
        tid = store.add(t)
        vals = (*values, scale)
        data = store.encode(tid, t.fields, vals)
        # byte for byte the Python twin's (rclpy's bytes of the template, patched); rclpy's own bytes
        # for these values equal them but in CDR padding, which its serialiser leaves uninitialised
        assert data == t.encode(vals)
        assert deserialize_message(data, TensorHandoff) == with_values(msg, vals)
        got = store.read(data)
        assert got is not None and got[0] == tid
        assert got[1] == t.values(data)  # scale: the same float32
        assert t.message_with(got[1]) == with_values(msg, vals)
    finally:
        store.close()


@settings(max_examples=40, deadline=None)
@given(values=values_common, frame_id=strings, backend=strings)
def test_the_core_patches_and_reads_bev_handoffs_as_rclpy_makes_them(values, frame_id, backend):
    store = native_store()
    try:
        msg = bev_handoff(frame_id=frame_id, backend=backend)
        t = CdrTemplate(msg)
        tid = store.add(t)
        data = store.encode(tid, t.fields, values)
        assert data == t.encode(values)  # byte for byte the Python twin's
        assert deserialize_message(data, BevHandoff) == with_values(msg, values)
        tid_read, read = store.read(data)
        assert tid_read == tid and read[:5] == t.values(data)
    finally:
        store.close()


@pytest.mark.parametrize("impl", ["python", "native"])
def test_a_datagram_differing_in_a_fixed_byte_or_its_length_matches_no_template(impl):
    t = CdrTemplate(tensor_handoff())
    good = t.encode((1, 2, 3, 4, bytes(64), 1.0))
    changed = tensor_handoff()
    changed.ring_id = 78
    foreign = (CdrTemplate(changed).encode((1, 2, 3, 4, bytes(64), 1.0)), good[:-4], good + b"\0\0\0\0",
               b"\x00\x01\x00\x00" + b"\xff" * 20, b"")
    if impl == "python":
        assert t.matches(good) and not any(t.matches(d) for d in foreign)
        return
    store = native_store()
    try:
        tid = store.add(t)
        assert store.read(good)[0] == tid and all(store.read(d) is None for d in foreign)
        store.remove(tid)
        assert store.read(good) is None
    finally:
        store.close()


@pytest.mark.parametrize("impl", ["python", "native"])
def test_values_out_of_range_raise_in_both_implementations(impl):
    t = CdrTemplate(bev_handoff())
    store = native_store() if impl == "native" else None
    encode = t.encode if store is None else (lambda v: store.encode(store.add(t), t.fields, v))
    try:
        for bad in ((2**31, 0, 0, 0, bytes(64)), (0, -1, 0, 0, bytes(64)), (0, 0, 0, 2**64, bytes(64)),
                    (0, 0, 0, 0, bytes(63)), (0, 0, 0, 0, bytes(65))):
            with pytest.raises(struct.error):
                encode(bad)
    finally:
        if store is not None:
            store.close()


def test_a_reader_shares_what_it_learns_with_the_core_and_lets_it_go_with_it(monkeypatch):
    """TemplateReader(native=): every template learnt is also the core's, so the core reads the
    next datagram; ``message_of`` turns what it read into the message rclpy would make; a template
    the reader lets go (KEPT) is gone from the core too."""
    monkeypatch.setattr(TemplateReader, "KEPT", 2)
    store = native_store()
    try:
        reader = TemplateReader(TensorHandoff, native=store)
        producers = [CdrTemplate(tensor_handoff(camera=c)) for c in ("A", "B", "C")]
        first = producers[0].encode((1, 2, 3, 4, bytes(64), 1.0))
        assert store.read(first) is None
        reader.deserialize(first)  # a miss: learnt, here and in the core
        data = producers[0].encode((5, 6, 7, 8, bytes([1]) * 64, 0.5))
        tid, values = store.read(data)
        assert reader.message_of(tid, values) == deserialize_message(data, TensorHandoff)
        assert reader.hits == 1
        for p in producers[1:]:  # two more templates: A's is let go (KEPT 2)
            reader.deserialize(p.encode((1, 2, 3, 4, bytes(64), 1.0)))
        assert store.read(data) is None and reader.message_of(tid, values) is None
        assert store.read(producers[2].encode((9, 9, 9, 9, bytes(64), 2.0))) is not None
    finally:
        store.close()
