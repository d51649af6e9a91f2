"""bevpool_msgs and numpy <-> message conversion (no ROS graph needed)."""
from __future__ import annotations

import bevpool_msgs.msg as msgs  # noqa: E402  (built by scripts/build_msgs.sh; missing = a real failure)
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402

from bevpool_ros import fp8  # noqa: E402
from bevpool_ros.demo.consumer import cell_center  # noqa: E402
from bevpool_ros.io.bev_message import bev_feature_msg, stamp_to_ns  # noqa: E402
from bevpool_ros.io.tensor_codec import (  # noqa: E402
    DTYPE_CODES,
    TensorError,
    decode_any,
    fill_msg,
    from_msg,
    inspect_header,
    make_tensor,
)


def test_dtype_codes_match_the_message_constants():
    T = msgs.Tensor
    for name, code in DTYPE_CODES.items():
        assert getattr(T, f"DTYPE_{name.upper()}") == code


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_roundtrip_through_serialization_is_exact(dtype):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 5)).astype(dtype)
    m = deserialize_message(serialize_message(make_tensor(a, "feat", "HWC")), msgs.Tensor)
    assert (m.name, m.layout, list(m.shape), m.dtype) == ("feat", "HWC", [3, 4, 5], DTYPE_CODES[dtype])
    back = from_msg(m)
    assert back.dtype == np.dtype(dtype) and np.array_equal(back, a)
    # little-endian bytes, row-major, exactly itemsize * prod(shape)
    assert bytes(m.data) == a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")


def test_reading_is_a_view_not_a_copy():
    m = make_tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    arr = from_msg(m)
    assert np.shares_memory(arr, np.frombuffer(memoryview(m.data), np.uint8))


def test_fp8_e4m3_codes():
    codes = np.arange(256, dtype=np.uint8)
    vals = fp8.decode(codes)
    assert vals[0x7E] == 448.0 and vals[0xFE] == -448.0 and vals[0x08] == 2.0 ** -6
    assert vals[0x01] == 2.0 ** -9  # smallest subnormal
    assert np.isnan(vals[0x7F]) and np.isnan(vals[0xFF])
    finite = ~np.isnan(vals)
    assert np.array_equal(fp8.encode(vals[finite]), codes[finite])  # every finite code round-trips
    # rounding: halfway between 1.0 (0x38) and 1.125 (0x39) goes to the even code; saturation at 448
    assert fp8.encode(np.float32([1.0625, 1000.0, -1000.0])).tolist() == [0x38, 0x7E, 0xFE]


def test_fp8_tensor_decodes_to_float16_exactly():
    rng = np.random.default_rng(2)
    a = rng.uniform(-4, 4, size=(2, 3, 8)).astype(np.float32)
    m = make_tensor(a, "feat", "HWC", dtype="float8_e4m3")
    assert m.dtype == msgs.Tensor.DTYPE_FLOAT8_E4M3 and len(m.data) == a.size
    back = from_msg(m)
    assert back.dtype == np.float16
    np.testing.assert_array_equal(back, fp8.decode(fp8.encode(a)).astype(np.float16))
    assert np.abs(back.astype(np.float32) - a).max() <= 0.25  # E4M3 step at |x| < 4 is 0.25


@pytest.mark.parametrize("mutate, reason", [
    (lambda m: setattr(m, "dtype", 99), "bad_dtype"),
    (lambda m: setattr(m, "dtype", msgs.Tensor.DTYPE_INT32), "bad_dtype"),
    (lambda m: setattr(m, "shape", [2, 3, 5]), "bad_size"),
    (lambda m: setattr(m, "data", m.data[:-1]), "bad_size"),
    (lambda m: setattr(m, "layout", "HW"), "bad_shape"),
])
def test_bad_headers_are_named(mutate, reason):
    m = make_tensor(np.zeros((2, 3, 4), np.float32), layout="HWC")
    mutate(m)
    with pytest.raises(TensorError) as e:
        from_msg(m)
    assert e.value.reason == reason


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(bad):
    a = np.ones((4, 4), np.float32)
    a[1, 2] = bad
    with pytest.raises(TensorError, match="non_finite"):
        from_msg(make_tensor(a))
    assert from_msg(make_tensor(a), check_finite=False).shape == (4, 4)
    codes = fp8.encode(np.ones(4, np.float32))
    codes[0] = 0x7F
    m = make_tensor(np.zeros(4, np.uint8))
    m.dtype, m.data = msgs.Tensor.DTYPE_FLOAT8_E4M3, codes.tobytes()
    with pytest.raises(TensorError, match="non_finite"):
        from_msg(m)


class _HostilePayload:
    """Claims an enormous length; any attempt to read or copy it fails the test."""

    def __len__(self):
        return 1 << 40

    def __buffer__(self, flags):
        raise AssertionError("payload touched before the size check")


class _FakeTensor:
    def __init__(self, shape, dtype_code, data):
        self.shape, self.dtype, self.data, self.layout = shape, dtype_code, data, ""


def test_oversized_tensor_refused_before_any_allocation():
    import tracemalloc

    tracemalloc.start()
    try:
        for msg in (_FakeTensor([1 << 20, 1 << 20, 80], 9, b""),      # shape claims 335 TB
                    _FakeTensor([4], 9, _HostilePayload()),            # payload claims 1 TiB
                    _FakeTensor([2 ** 62, 2 ** 62], 9, b"")):          # would overflow int64
            with pytest.raises(TensorError) as e:
                inspect_header(msg, max_bytes=64 << 20)
            assert e.value.reason == "too_large"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_bev_feature_message_places_every_cell(nuscenes_rig):
    rig = nuscenes_rig
    Z, Y, X = rig.grid_shape
    bev = np.random.default_rng(3).standard_normal((Z, Y, X, rig.channels)).astype(np.float32)
    m = bev_feature_msg(bev, rig, 1_700_000_000_123_456_789, "base_link", ["CAM_FRONT"], [5], [], "cpu", "fp32")
    m = deserialize_message(serialize_message(m), msgs.BevFeature)
    assert stamp_to_ns(m.header.stamp) == 1_700_000_000_123_456_789 and m.header.frame_id == "base_link"
    assert (m.layers, m.height, m.width, m.channels, m.layout) == (Z, Y, X, rig.channels, "ZYXC")
    assert list(m.tensor.shape) == [Z, Y, X, rig.channels] and m.tensor.layout == "ZYXC"
    np.testing.assert_array_equal(decode_any(m.tensor).reshape(Z, Y, X, -1), bev)
    # cell (0, y, x) centre from the message alone matches the rig's axes
    cx, cy, _ = cell_center(m, 0, 5, 7)
    assert cx == pytest.approx(rig.x.lower + 7.5 * rig.x.step) and cy == pytest.approx(rig.y.lower + 5.5 * rig.y.step)
    m16 = bev_feature_msg(bev, rig, 0, "ego", [], [], [], "cpu", "fp32", dtype="float16")
    assert m16.tensor.dtype == msgs.Tensor.DTYPE_FLOAT16 and len(m16.tensor.data) == bev.size * 2


def test_fill_msg_refuses_unsupported_encodings():
    with pytest.raises(TensorError):
        fill_msg(msgs.Tensor(), np.zeros(3, np.complex64))


def test_reusable_buffer_casts_in_place_and_keeps_its_memory():
    from bevpool_ros.io.tensor_codec import ReusableBuffer

    reuse = ReusableBuffer()
    a = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    m1 = fill_msg(msgs.Tensor(), a, dtype="float16", reuse=reuse)
    first = m1.data
    np.testing.assert_array_equal(from_msg(m1), a.astype(np.float16))
    m2 = fill_msg(msgs.Tensor(), a * 2, dtype="float16", reuse=reuse)
    assert m2.data is first  # same storage, rewritten
    np.testing.assert_array_equal(from_msg(m2), (a * 2).astype(np.float16))
    m3 = deserialize_message(serialize_message(fill_msg(msgs.Tensor(), a, reuse=reuse)), msgs.Tensor)
    np.testing.assert_array_equal(from_msg(m3), a)


# --- the bounded input type and the Fast DDS size guard --------------------------------------
def test_camera_tensor_bound_is_the_guards_and_the_parameters():
    import re

    from conftest import REPO

    from bevpool_ros.params import table as P
    from bevpool_ros.ros.dds_guard import TENSOR_BOUND_BYTES

    text = (REPO / "msg" / "CameraTensor.msg").read_text()
    assert int(re.search(r"^uint8\[<=(\d+)\] data$", text, re.M).group(1)) == TENSOR_BOUND_BYTES
    assert "std_msgs/Header" not in text and not re.search(r"^string \w", text, re.M)  # fully bounded
    assert P.BY_NAME["input.max_tensor_bytes"].high == TENSOR_BOUND_BYTES


def test_camera_tensor_refuses_data_beyond_its_bound():
    from bevpool_ros.ros.dds_guard import TENSOR_BOUND_BYTES

    m = msgs.CameraTensor()
    m.data = bytes(TENSOR_BOUND_BYTES + 1)
    with pytest.raises(Exception):
        serialize_message(m)


def test_hand_built_cdr_reads_back_like_rclpy_serialization():
    from ros_harness import camera_tensor_cdr

    raw = camera_tensor_cdr(5 * 10**9 + 7, "cam_x", "feat", "HWC", (2, 3, 4), 9, bytes(range(96)))
    m = deserialize_message(raw, msgs.CameraTensor)
    assert (stamp_to_ns(m.header.stamp), m.header.frame_id, m.name, m.layout, list(m.shape), m.dtype) == (
        5 * 10**9 + 7, "cam_x", "feat", "HWC", [2, 3, 4], 9)
    assert bytes(m.data) == bytes(range(96)) and len(raw) == len(serialize_message(m))


def test_guarded_profile_adds_one_preallocated_reader_per_topic():
    import xml.etree.ElementTree as ET

    from bevpool_ros.paths import config_dir
    from bevpool_ros.ros.dds_guard import guarded_profile

    base = (config_dir() / "dds" / "fastdds_large_data.xml").read_text()
    topics = ["/rig_a/cameras/CAM_FRONT/depth", "/rig_a/cameras/CAM_FRONT/feat"]
    root = ET.fromstring(guarded_profile(base, topics, depth=5))
    ns = {"f": "http://www.eprosima.com"}
    readers = [r for r in root.findall("f:data_reader", ns) if r.get("is_default_profile") != "true"]
    assert sorted(r.get("profile_name") for r in readers) == topics
    for r in readers:
        assert r.find("f:historyMemoryPolicy", ns).text == "PREALLOCATED"
        assert r.find("f:topic/f:resourceLimitsQos/f:max_samples", ns).text == "5"
        assert r.find("f:qos/f:data_sharing/f:kind", ns).text == "OFF"
    assert root.find("f:participant", ns) is not None  # the shipped transports stay
