"""Depth images as input: the Image codec (every encoding, padding, byte order, zero-copy, bad
images), depth -> distribution against a long-hand computation, and bevpool_node over real DDS
with per-camera ``input.depth_mode`` (image and distribution cameras in one rig) against the FP64
reference, every bad image dropped and counted while the node goes on."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros.io.depth_image import (
    DepthBins,
    DepthImageConverter,
    converters_for,
    depth_distribution,
    resize_nearest,
)
from bevpool_ros.io.image_codec import ENCODINGS, ImageError, array_to_image, check_image, image_to_array


def _array_for(encoding, h=5, w=7, seed=0):
    dtype, ch = ENCODINGS[encoding]
    rng = np.random.default_rng(seed)
    shape = (h, w) if ch == 1 else (h, w, ch)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(0.5, 60, shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_encoding_round_trips(encoding):
    arr = _array_for(encoding)
    msg = array_to_image(arr, encoding)
    assert (msg.encoding, msg.height, msg.width, msg.is_bigendian) == (encoding, 5, 7, 0)
    back = image_to_array(msg)
    np.testing.assert_array_equal(back, arr)
    assert back.dtype == arr.dtype


def test_read_is_zero_copy_and_skips_row_padding():
    arr = _array_for("32FC1")
    msg = array_to_image(arr, "32FC1")
    padded = np.zeros((5, 7 * 4 + 12), np.uint8)  # 12 padding bytes per row
    padded[:, :28] = np.frombuffer(bytes(msg.data), np.uint8).reshape(5, 28)
    msg.step, msg.data = 40, padded.tobytes()
    got = image_to_array(msg)
    np.testing.assert_array_equal(got, arr)
    msg2 = array_to_image(arr, "32FC1")
    view = image_to_array(msg2)
    memoryview(msg2.data)[0:4] = np.float32(123.0).tobytes()  # the view sees the payload itself
    assert view[0, 0] == 123.0


def test_big_endian_images_are_converted():
    arr = _array_for("16UC1")
    msg = array_to_image(arr, "16UC1")
    msg.is_bigendian = 1
    msg.data = arr.astype(">u2").tobytes()
    np.testing.assert_array_equal(image_to_array(msg), arr)


@pytest.mark.parametrize("reason, edit", [
    ("bad_encoding", dict(encoding="yuv422")),
    ("bad_size", dict(step=4)),                  # shorter than a row
    ("bad_size", dict(height=6)),                # data shorter than step x height
    ("bad_size", dict(width=0)),
])
def test_bad_images_raise_with_their_reason(reason, edit):
    msg = array_to_image(_array_for("32FC1"), "32FC1")
    for k, v in edit.items():
        setattr(msg, k, v)
    with pytest.raises(ImageError) as e:
        image_to_array(msg)
    assert e.value.reason == reason


def test_size_limit_is_checked_before_the_payload():
    msg = array_to_image(_array_for("32FC1", 64, 64), "32FC1")
    with pytest.raises(ImageError) as e:
        check_image(msg, max_bytes=1024)
    assert e.value.reason == "too_large"


# --- depth -> distribution ---------------------------------------------------------------------
def long_hand(depth_m, bins: DepthBins, H, W):
    """Nearest sampling + one-hot, one pixel at a time."""
    h, w = depth_m.shape
    out = np.zeros((bins.count, H, W))
    for i in range(H):
        for j in range(W):
            d = depth_m[min(int((i + 0.5) * h / H), h - 1), min(int((j + 0.5) * w / W), w - 1)]
            if not np.isfinite(d) or d <= 0:
                continue
            k = int(np.rint((d - bins.start) / bins.step))
            if 0 <= k < bins.count:
                out[k, i, j] = 1.0
    return out


BINS = DepthBins(1.0, 1.0, 59)


@pytest.mark.parametrize("h, w", [(16, 44), (64, 176), (37, 100), (8, 20)])
def test_one_hot_matches_long_hand_at_any_resolution(h, w):
    rng = np.random.default_rng(h * w)
    depth = rng.uniform(0.2, 65.0, (h, w)).astype(np.float32)
    depth[rng.random((h, w)) < 0.1] = 0.0
    depth[0, 0], depth[-1, -1] = np.nan, np.inf
    got = depth_distribution(resize_nearest(depth, 16, 44), BINS)
    np.testing.assert_array_equal(got, long_hand(depth, BINS, 16, 44))
    assert got.dtype == np.float32 and set(np.unique(got.sum(axis=0))) <= {0.0, 1.0}


def test_gaussian_is_normalised_peaks_at_the_depth_and_zero_where_invalid():
    depth = np.array([[10.0, 10.4, 0.0, np.nan, -3.0, 100.0]], np.float32)
    got = depth_distribution(depth, BINS, "gaussian", sigma=0.7)
    np.testing.assert_allclose(got[:, 0, :2].sum(axis=0), 1.0, rtol=1e-5)
    assert got[:, 0, 0].argmax() == 9 and got[:, 0, 1].argmax() == 9  # bin 9 holds 10 m
    centres = BINS.start + BINS.step * np.arange(BINS.count)
    want = np.exp(-0.5 * ((centres - 10.4) / 0.7) ** 2)
    np.testing.assert_allclose(got[:, 0, 1], want / want.sum(), rtol=1e-5, atol=1e-7)  # float32
    assert not got[:, 0, 2:].any()


def test_millimetres_and_metres_give_the_same_distribution(nuscenes_rig):
    conv = DepthImageConverter(nuscenes_rig)
    metres = np.random.default_rng(3).uniform(1, 50, (90, 160)).astype(np.float32)
    mm = np.rint(metres * 1000).astype(np.uint16)
    a = conv(array_to_image(mm.astype(np.float32) / 1000, "32FC1"))
    b = conv(array_to_image(mm, "16UC1"))
    np.testing.assert_allclose(a.metres, b.metres, rtol=1e-6)  # x 0.001 vs / 1000: one rounding apart
    assert a.metres.dtype == np.float32 and a.metres.shape == nuscenes_rig.depth_shape[2:]
    assert a.shape == nuscenes_rig.depth_shape[1:]  # the distribution it stands for
    np.testing.assert_array_equal(a.distribution(), b.distribution())
    with pytest.raises(ImageError) as e:
        conv(array_to_image(np.zeros((4, 4, 3), np.uint8), "rgb8"))
    assert e.value.reason == "bad_encoding"


def test_depth_mode_per_camera(nuscenes_rig):
    names = [c.name for c in nuscenes_rig.cameras]
    assert set(converters_for(names, ["image"], nuscenes_rig, "one_hot", 0.5, 1 << 20)) == set(names)
    assert converters_for(names, ["distribution"], nuscenes_rig, "one_hot", 0.5, 1 << 20) == {}
    mixed = converters_for(names, ["image", "distribution"] * 3, nuscenes_rig, "gaussian", 0.5, 1 << 20)
    assert list(mixed) == names[0::2]
    with pytest.raises(ValueError, match="2 values for 6 cameras"):
        converters_for(names, ["image", "image"], nuscenes_rig, "one_hot", 0.5, 1 << 20)



# --- backends take MetricDepth: expanded on their own device (the host for cpu) ----------------
def metric_frame(rig, seed, image_cameras, spec):
    """Per-camera inputs: MetricDepth (with holes and out-of-range depths) for ``image_cameras``,
    distributions for the others; plus the distributions every camera stands for (the twin's)."""
    from bevpool_ros.metric_depth import MetricDepth

    N, D, H, W = rig.depth_shape
    rng = np.random.default_rng(seed)
    cameras, dense = [], np.zeros(rig.depth_shape, np.float32)
    for n in range(N):
        feat = rng.uniform(-1, 1, (H, W, rig.channels)).astype(np.float32)
        if n in image_cameras:
            m = rng.uniform(0.2, spec.bins.start + spec.bins.step * D + 3, (H, W)).astype(np.float32)
            m[rng.random((H, W)) < 0.1] = 0.0
            m[0, :3] = np.nan, np.inf, -2.0
            md = MetricDepth(m, spec)
            cameras.append((md, feat))
            dense[n] = md.distribution()
        else:
            dense[n] = rng.random((D, H, W), dtype=np.float32)
            cameras.append((dense[n], feat))
    return cameras, dense, np.stack([c[1] for c in cameras])


@pytest.mark.parametrize("mode", ["one_hot", "gaussian"])
def test_cpu_backend_expands_depth_images_like_the_twin(nuscenes_rig, canonical_map, mode):
    from bevpool_ros.backends.cpu import CpuBackend
    from bevpool_ros.metric_depth import DepthSpec

    spec = DepthSpec(DepthBins.of_rig(nuscenes_rig), mode, 0.8)
    be = CpuBackend()
    be.prepare(canonical_map)
    cameras, dense, feat = metric_frame(nuscenes_rig, 1, (0, 2, 3), spec)
    got = be.pool_cameras(cameras)
    np.testing.assert_array_equal(got, be.pool(dense, feat))
    assert np.abs(got).max() > 0


def test_staging_keeps_depth_images_in_their_own_region(nuscenes_rig):
    from bevpool_ros.backends import InputError
    from bevpool_ros.backends.staging import CameraStaging
    from bevpool_ros.metric_depth import DepthSpec, MetricDepth

    N, D, H, W = nuscenes_rig.depth_shape
    spec = DepthSpec(DepthBins.of_rig(nuscenes_rig))
    st = CameraStaging(nuscenes_rig.depth_shape, (N, H, W, 8), metric_dtype=np.float16)
    cameras, dense, _ = metric_frame(nuscenes_rig, 2, (1, 4), spec)
    cameras = [(d, f[..., :8]) for d, f in cameras]
    staged = st.stage(cameras)
    assert staged.image_cameras == (1, 4) and staged.spec == spec
    assert staged.depth == np.float32  # the distribution cameras' dtype decides the stream's
    np.testing.assert_array_equal(st.slots("metric", np.float32)[4], cameras[4][0].metres)
    np.testing.assert_array_equal(st.slots("depth", np.float32)[0], dense[0])
    only_images = [(MetricDepth(np.full((H, W), 5.0, np.float32), spec), f) if n < 5 else (None, None)
                   for n, (_, f) in enumerate(cameras)]
    staged = st.stage(only_images)
    assert staged.depth == np.float16 and staged.image_cameras == (0, 1, 2, 3, 4)
    assert not st.slots("depth", np.float16)[5].any()  # the missing camera's slot is zero
    other = DepthSpec(spec.bins, "gaussian", 0.5)
    for bad, why in ((MetricDepth(np.ones((H, W + 1), np.float32), spec), "shape"),
                     (MetricDepth(np.ones((H, W), np.int32), spec), "float metres"),
                     (MetricDepth(np.ones((H, W), np.float32), DepthSpec(DepthBins(1.0, 1.0, D + 1))), "depth bins"),
                     (MetricDepth(np.ones((H, W), np.float32), other), "different distribution rules")):
        with pytest.raises(InputError, match=why):
            st.stage([(bad, cameras[0][1])] + cameras[1:])
    with pytest.raises(InputError, match="expands them"):  # a staging that cannot expand refuses them
        CameraStaging(nuscenes_rig.depth_shape, (N, H, W, 8)).stage(cameras)


def test_slot_runs():
    from bevpool_ros.backends.gpu.frame import slot_runs

    assert slot_runs(6, skip=(0, 2, 4)) == [(1, 1), (3, 1), (5, 1)]
    assert slot_runs(6, keep=(0, 1, 2, 4)) == [(0, 3), (4, 1)]
    assert slot_runs(6) == [(0, 6)] and slot_runs(6, keep=()) == []

# --- the node over DDS -----------------------------------------------------------------------
MODES = ["image", "distribution", "image", "distribution", "image", "distribution"]
SIZES = {0: ("32FC1", 64, 176), 2: ("16UC1", 37, 100), 4: ("mono16", 900, 1600)}  # every depth encoding, any size
MM = ("16UC1", "mono16")


class DepthImageGraph:
    """bevpool_node (image mode on cameras 0, 2, 4) + a publisher of depth Images / Tensors."""

    def __init__(self, rig):
        from ros_harness import isolate_ros_env, spin_until

        from bevpool_ros.demo.session import NodeProcess

        isolate_ros_env()
        import rclpy
        from bevpool_msgs.msg import CameraTensor
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import CameraInfo, Image

        from bevpool_ros.demo.consumer import BevConsumer
        from bevpool_ros.ros.qos import make_qos
        from bevpool_ros.synthetic import SyntheticScene

        self.rig, self.scene = rig, SyntheticScene(rig)
        # backend 'best': cpu here, cuda on a GPU machine (the depth images expand on the device)
        self.node = NodeProcess({"input.depth_mode": MODES, "input.qos_reliability": "reliable",
                                 "diagnostics.period_s": 0.1, "sync.camera_timeout_s": 0.3,
                                 "input.max_tensor_bytes": 8 << 20})
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.pubnode = rclpy.create_node("depth_image_pub", context=self.ctx)
        self.con = BevConsumer(context=self.ctx)
        for n in (self.pubnode, self.con):
            self.ex.add_node(n)
        qos = make_qos("reliable", 5)
        self.pubs = {}
        for n, cam in enumerate(rig.cameras):
            kind = Image if MODES[n] == "image" else CameraTensor
            self.pubs[(cam.name, "depth")] = self.pubnode.create_publisher(kind, f"cameras/{cam.name}/depth", qos)
            self.pubs[(cam.name, "feat")] = self.pubnode.create_publisher(CameraTensor, f"cameras/{cam.name}/feat", qos)
            self.pubs[(cam.name, "info")] = self.pubnode.create_publisher(CameraInfo,
                                                                          f"cameras/{cam.name}/camera_info", qos)
        self.spin_until = lambda pred, t=20.0: spin_until(self.ex, pred, t)
        self.stamp = 5_000 * 10 ** 9
        ok = self.spin_until(lambda: all(p.get_subscription_count() > 0
                                         for k, p in self.pubs.items() if k[1] != "info"))
        assert ok, self.node.output()
        for _ in range(40):  # discovery is asymmetric: publish until a grid comes back
            if self.publish_and_wait(0, timeout=1.0)[0] is not None:
                break

    def frame(self, index):
        """(metric depth image per image-mode camera, depth Tensor arrays, features) of a scene frame."""
        depth, feat = self.scene.frame(index)
        from bevpool_ros.metric_depth import millimetre_image, most_likely_depth

        metric = most_likely_depth(depth, DepthBins.of_rig(self.rig))
        images = {}
        for n, (enc, h, w) in SIZES.items():  # the camera sees finer than the feature grid
            images[n] = (millimetre_image(metric[n], h, w) if enc in MM else resize_nearest(metric[n], h, w), enc)
        return images, depth, feat

    def publish(self, index, edit_image=None):
        from bevpool_ros.demo.synthetic_publisher import camera_info_msg
        from bevpool_ros.io.bev_message import ns_to_time
        from bevpool_ros.io.tensor_codec import make_camera_tensor

        self.stamp += 100_000_000
        st = ns_to_time(self.stamp)
        images, depth, feat = self.frame(index)
        for n, cam in enumerate(self.rig.cameras):
            self.pubs[(cam.name, "info")].publish(camera_info_msg(self.rig, n, st, f"{cam.name.lower()}_optical"))
            if n in images:
                arr, enc = images[n]
                dmsg = array_to_image(arr, enc)
                if edit_image and n == 0:
                    dmsg = edit_image(dmsg)
            else:
                dmsg = make_camera_tensor(depth[n], "depth", "DHW", "float32")
            fmsg = make_camera_tensor(feat[n], "feat", "HWC", "float32")
            for m, stream in ((dmsg, "depth"), (fmsg, "feat")):
                m.header.stamp = st
                self.pubs[(cam.name, stream)].publish(m)
        return self.stamp, images, depth, feat

    def publish_and_wait(self, index, timeout=30.0, edit_image=None, resend_s=2.0):
        """Publish frame ``index`` (resent, fresh stamps: one send is never trusted on a busy
        machine) until a grid comes back; (ReceivedBev or None, images, depth, feat)."""
        import time

        sent, deadline = [], time.monotonic() + timeout

        def arrived():
            return any(s in self.con.by_stamp() for s in sent)
        while time.monotonic() < deadline and not arrived():
            stamp, images, depth, feat = self.publish(index, edit_image)
            sent.append(stamp)
            self.spin_until(arrived, min(resend_s, max(0.0, deadline - time.monotonic())))
        got = next((self.con.by_stamp()[s] for s in sent if s in self.con.by_stamp()), None)
        return got, images, depth, feat

    def expected(self, images, depth, feat):
        from bevpool_ros.reference import pool_reference
        from bevpool_ros.scatter_map import scatter_map_for

        bins = DepthBins.of_rig(self.rig)
        _, _, H, W = self.rig.depth_shape
        d = depth.astype(np.float64).copy()
        for n, (arr, enc) in images.items():
            d[n] = long_hand(arr.astype(np.float32) * (1e-3 if enc in MM else 1.0), bins, H, W)
        return pool_reference(d, feat, scatter_map_for(self.rig))

    def close(self):
        import rclpy

        rc, self.log = self.node.stop()
        self.ex.shutdown()
        self.pubnode.destroy_node()
        self.con.destroy_node()
        rclpy.try_shutdown(context=self.ctx)
        return rc


@pytest.fixture(scope="module")
def graph(nuscenes_rig):
    g = DepthImageGraph(nuscenes_rig)
    yield g
    assert g.close() == 0, g.log[-3000:]


def _close(got, ref):
    """At the tolerance of the backend and precision the node chose."""
    from ros_harness import assert_bev_matches

    assert_bev_matches(got.bev, ref, got.msg)


@pytest.mark.ros
def test_image_and_distribution_cameras_pool_like_the_reference(graph):
    for index in (1, 2):
        got, images, depth, feat = graph.publish_and_wait(index)
        assert got is not None, graph.node.output()[-3000:]
        ref = graph.expected(images, depth, feat)
        assert np.abs(ref).max() > 0
        _close(got, ref)


@pytest.mark.ros
def test_nan_and_zero_depth_pixels_contribute_nothing(graph):
    def holes(msg):
        arr = image_to_array(msg).copy()
        arr[:20], arr[:, :30] = np.nan, 0.0  # REP 118: NaN = no return
        return array_to_image(arr, "32FC1")
    got, images, depth, feat = graph.publish_and_wait(3, edit_image=holes)
    assert got is not None, graph.node.output()[-3000:]
    arr = images[0][0].copy()
    arr[:20], arr[:, :30] = np.nan, 0.0
    images[0] = (arr, "32FC1")
    _close(got, graph.expected(images, depth, feat))


def _reencode(encoding):
    def edit(msg):
        msg.encoding = encoding
        return msg
    return edit


def _truncate(msg):
    msg.data = bytes(msg.data)[:-8]
    return msg


def _too_large(msg):
    return array_to_image(np.ones((1200, 1800), np.float32), "32FC1")  # 8.6 MB > the node's 8 MiB


@pytest.mark.ros
@pytest.mark.parametrize("reason, edit", [("bad_encoding", _reencode("rgb8")), ("bad_encoding", _reencode("8UC3")),
                                          ("bad_encoding", _reencode("Q" * 1_000_000)),  # one short log line
                                          ("bad_size", _truncate), ("too_large", _too_large)])
def test_bad_depth_images_are_dropped_counted_and_the_node_goes_on(graph, reason, edit):
    key = f"dropped_{reason}"
    graph.con.diagnostics.clear()
    graph.spin_until(lambda: graph.con.latest_diagnostics() is not None, 10.0)
    before = int(graph.con.latest_diagnostics().get(key, 0))
    stamp, *_ = graph.publish(4, edit_image=edit)

    def grown():
        d = graph.con.latest_diagnostics()
        return d is not None and int(d.get(key, 0)) > before
    assert graph.spin_until(grown, 10.0), graph.node.output()[-3000:]
    assert stamp not in graph.con.by_stamp()
    assert graph.node.alive()
    assert max(map(len, graph.node.output().splitlines())) < 1000  # input text is cut in log lines
    got, images, depth, feat = graph.publish_and_wait(5)
    assert got is not None
    _close(got, graph.expected(images, depth, feat))


@pytest.mark.ros
def test_wrong_number_of_depth_modes_exits_with_code_2():
    from ros_harness import isolate_ros_env

    from bevpool_ros.demo.session import NodeProcess

    isolate_ros_env()
    node = NodeProcess({"backend": "cpu", "input.depth_mode": ["image", "image"]})
    assert node.proc.wait(60) == 2
    assert "input.depth_mode" in node.stop()[1]


def test_cv_bridge_is_used_when_installed(monkeypatch):
    """cv_bridge is not installable here (docs/environment.md): a stand-in with its API records that
    image_codec hands the conversion over, with the arguments the real one takes."""
    import sys
    import types

    import bevpool_ros.io.image_codec as codec

    calls = []

    class CvBridge:  # the two calls image_codec makes, as cv_bridge's CvBridge defines them
        def imgmsg_to_cv2(self, img_msg, desired_encoding="passthrough"):
            calls.append(("imgmsg_to_cv2", desired_encoding))
            dtype, ch = ENCODINGS[img_msg.encoding]
            arr = np.frombuffer(bytes(img_msg.data), dtype).reshape(img_msg.height, -1)
            return arr if ch == 1 else arr.reshape(img_msg.height, img_msg.width, ch)

        def cv2_to_imgmsg(self, cvim, encoding="passthrough", header=None):
            calls.append(("cv2_to_imgmsg", encoding))
            from sensor_msgs.msg import Image

            img = Image(height=cvim.shape[0], width=cvim.shape[1], encoding=encoding,
                        step=cvim.strides[0], data=cvim.tobytes())
            return img

    fake = types.ModuleType("cv_bridge")
    fake.CvBridge = CvBridge
    assert codec._BRIDGE is None  # this venv: the own conversion
    monkeypatch.setitem(sys.modules, "cv_bridge", fake)
    monkeypatch.setattr(codec, "_BRIDGE", codec._cv_bridge())  # what the import finds where it is installed
    assert isinstance(codec._BRIDGE, CvBridge)
    arr = _array_for("16UC1")
    back = codec.image_to_array(codec.array_to_image(arr, "16UC1"))
    np.testing.assert_array_equal(back, arr)
    assert calls == [("cv2_to_imgmsg", "16UC1"), ("imgmsg_to_cv2", "passthrough")]
    bad = codec.array_to_image(arr, "16UC1")
    bad.encoding = "yuv422"
    with pytest.raises(ImageError):  # the checks still run first
        codec.image_to_array(bad)
    assert len(calls) == 3  # the bad image never reached cv_bridge
