#!/usr/bin/env python3
"""Where a multi-megabyte message's DDS hop goes: one bevpool_msgs/Tensor between two rclpy processes.

    python bench/dds_hop.py [--sizes 1024,2621440,5242880] [--messages 200] [--rate 30] [--out FILE]

For each (transport setting, message size, conversion) it runs a publisher and a subscriber
process and measures, per message, CLOCK_MONOTONIC from just before ``publish()`` to the
subscriber's callback (one clock across processes). Conversions: ``msg`` (a Tensor message on
both sides, as the node does) or ``raw`` (pre-serialized CDR published, raw bytes received: the
hop without Python<->C conversion). Transport settings: the shipped profile
(config/dds/fastdds_large_data.xml), Fast DDS's builtin default (512 KiB shared-memory segment +
UDPv4), the LARGE_DATA builtin, UDPv4 only, synchronous vs asynchronous publication, and the
node's bounded input type CameraTensor with data-sharing off and on. The
subscriber also lists the shared-memory segments Fast DDS created (which transport is used).
Also timed in-process: serialize / deserialize of the same message and a plain memcpy of it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PROFILE = ROOT / "config" / "dds" / "fastdds_large_data.xml"
TOPIC = "dds_hop"
# name -> environment for both processes (None removes the variable)
SETTINGS = {
    "shipped_profile": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE)},
    "builtin_default": {"FASTDDS_DEFAULT_PROFILES_FILE": None},
    "builtin_large_data": {"FASTDDS_DEFAULT_PROFILES_FILE": None, "FASTDDS_BUILTIN_TRANSPORTS": "LARGE_DATA"},
    "udp_only": {"FASTDDS_DEFAULT_PROFILES_FILE": None, "FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"},
    "shipped_profile_sync": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE),
                             "RMW_FASTRTPS_PUBLICATION_MODE": "SYNCHRONOUS"},
    "shipped_profile_async": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE),
                              "RMW_FASTRTPS_PUBLICATION_MODE": "ASYNCHRONOUS"},
    # a fully bounded type (bench/dds_probe_msgs): as rmw configures it (data-sharing forced off) ...
    "bounded_type": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE), "_type": "bounded"},
    # ... and with the QoS from XML, where Fast DDS turns data-sharing delivery on for bounded types
    "bounded_type_qos_from_xml": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE), "_type": "bounded",
                                  "RMW_FASTRTPS_USE_QOS_FROM_XML": "1"},
    # the node's own bounded input type, bevpool_msgs/CameraTensor: data-sharing off (rmw's
    # default) and on (QoS from XML: Fast DDS's AUTO data-sharing for a bounded type), every size
    "camera_tensor": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE), "_type": "camera"},
    "camera_tensor_data_sharing": {"FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE), "_type": "camera",
                                   "RMW_FASTRTPS_USE_QOS_FROM_XML": "1"},
}
PROBE_MSGS = ROOT / "bench" / "dds_probe_msgs"


def ensure_probe_type() -> None:
    """Build the bounded probe message into this venv once (as scripts/build_msgs.sh builds ours)."""
    try:
        import bevpool_probe_msgs.msg  # noqa: F401
        return
    except ImportError:
        pass
    prefix = Path(sys.prefix)
    build = ROOT / "build" / f"dds_probe_msgs_py{sys.version_info[0]}{sys.version_info[1]}"
    env = dict(os.environ, AMENT_PREFIX_PATH=str(prefix), PATH=f"{prefix / 'bin'}:{os.environ['PATH']}")
    for cmd in (["cmake", "-S", str(PROBE_MSGS), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                 f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_TESTING=OFF"],
                ["cmake", "--build", str(build)], ["cmake", "--install", str(build)]):
        subprocess.run(cmd, env=env, check=True, capture_output=True)


def message_class(kind: str):
    if kind == "camera":
        from bevpool_msgs.msg import CameraTensor

        return CameraTensor
    if kind == "bounded":
        from bevpool_probe_msgs.msg import BoundedBlob

        return BoundedBlob
    from bevpool_msgs.msg import Tensor

    return Tensor


def probe_message(kind: str, nbytes: int, seq: int):
    """A Tensor (header first, so stamp.sec is the CDR's first field) or a BoundedBlob (stamp first)."""
    values = np.full(max(1, nbytes // 4), seq % 7, np.float32)
    if kind == "bounded":
        import array

        m = message_class(kind)()
        data = array.array("B")
        data.frombytes(values.view(np.uint8))
        m.data = data
        return m
    from bevpool_ros.io.tensor_codec import make_camera_tensor, make_tensor

    return (make_camera_tensor if kind == "camera" else make_tensor)(values, "probe", "", "float32")


def stamp_of(m):
    return m.stamp if hasattr(m, "stamp") else m.header.stamp


def shm_segments() -> dict:
    out = {}
    for name in os.listdir("/dev/shm"):
        if name.startswith(("fastdds", "fastrtps", "fast_datasharing")) and not name.endswith("_el"):
            try:
                out[name] = os.stat(f"/dev/shm/{name}").st_size
            except OSError:
                pass
    return out


def role_sub(args) -> int:
    import rclpy

    from bevpool_ros.ros.qos import make_qos

    rclpy.init(args=[sys.argv[0]])
    node = rclpy.create_node("dds_hop_sub")
    got = []

    def on(m):
        t = time.monotonic_ns()
        if args.conversion == "raw":
            seq = int.from_bytes(m[4:8], "little")  # header.stamp.sec: first field after the 4-byte CDR header
        else:
            seq = int(stamp_of(m).sec)
        got.append((seq, t))

    node.create_subscription(message_class(args.type), TOPIC, on, make_qos("reliable", 10),
                             raw=args.conversion == "raw")
    Path(args.record + ".ready").touch()
    segments = {}
    deadline = time.monotonic() + args.messages / args.rate + 30
    while time.monotonic() < deadline and len(got) < args.messages and not Path(args.record + ".stop").exists():
        rclpy.spin_once(node, timeout_sec=0.05)
        if got and not segments:
            segments = shm_segments()
    Path(args.record).write_text(json.dumps({"got": got, "shm_segments": segments}))
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def role_pub(args) -> int:
    import rclpy
    from rclpy.serialization import serialize_message

    from bevpool_ros.ros.qos import make_qos

    rclpy.init(args=[sys.argv[0]])
    node = rclpy.create_node("dds_hop_pub")
    pub = node.create_publisher(message_class(args.type), TOPIC, make_qos("reliable", 10))
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    msgs = [probe_message(args.type, args.size, i) for i in range(8)]  # built before timing
    sent, call = [], []
    period = 1.0 / args.rate
    nxt = time.monotonic()
    for seq in range(args.messages):
        m = msgs[seq % len(msgs)]
        stamp_of(m).sec = seq  # the sequence number travels as the stamp's seconds
        payload = serialize_message(m) if args.conversion == "raw" else m
        nxt += period
        while time.monotonic() < nxt:
            time.sleep(min(0.002, max(0.0, nxt - time.monotonic())))
        t0 = time.monotonic_ns()
        pub.publish(payload)
        t1 = time.monotonic_ns()
        sent.append((seq, t0))
        call.append((t1 - t0) / 1e6)
    Path(args.record).write_text(json.dumps({"sent": sent, "publish_call_ms": call}))
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def run_one(setting: str, size: int, conversion: str, args) -> dict:
    env = dict(os.environ)
    kind = SETTINGS[setting].get("_type", "tensor")
    for k, v in SETTINGS[setting].items():
        if not k.startswith("_"):
            env.pop(k, None) if v is None else env.__setitem__(k, v)
    env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    env["BEVPOOL_DDS_PROFILE"] = "0"  # this script decides the profile
    work = Path(tempfile.mkdtemp(prefix="dds_hop_"))
    common = ["--size", str(size), "--conversion", conversion, "--messages", str(args.messages),
              "--rate", str(args.rate), "--type", kind]
    me = [sys.executable, str(Path(__file__).resolve())]
    before = set(shm_segments())  # /dev/shm is shared: report only what this run created
    sub = subprocess.Popen(me + ["--role", "sub", "--record", str(work / "sub.json"), *common], env=env)
    while not (work / "sub.json.ready").exists() and sub.poll() is None:
        time.sleep(0.05)
    pub = subprocess.run(me + ["--role", "pub", "--record", str(work / "pub.json"), *common], env=env,
                         timeout=args.messages / args.rate * 3 + 90)
    deadline = time.monotonic() + 5
    while sub.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    (work / "sub.json.stop").touch()
    sub.wait(30)
    p = json.loads((work / "pub.json").read_text()) if pub.returncode == 0 else {"sent": [], "publish_call_ms": []}
    s = json.loads((work / "sub.json").read_text())
    sent = dict(p["sent"])
    lat = [(t - sent[q]) / 1e6 for q, t in s["got"] if q in sent and q >= 10]
    call = p["publish_call_ms"][10:]
    pct = lambda v, q: float(np.percentile(v, q)) if v else float("nan")  # noqa: E731
    return {"setting": setting, "type": kind, "size_bytes": size, "conversion": conversion, "sent": len(sent),
            "received": len(s["got"]), "hop_p50_ms": pct(lat, 50), "hop_p99_ms": pct(lat, 99),
            "publish_call_p50_ms": pct(call, 50),
            "shm_segments_created": sorted({size for name, size in s["shm_segments"].items() if name not in before})}


def in_process(size: int) -> dict:
    """The copies around the hop, timed in one process (median of 50)."""
    from bevpool_msgs.msg import Tensor
    from rclpy.serialization import deserialize_message, serialize_message

    m = probe_message("tensor", size, 0)
    buf = serialize_message(m)
    src = np.frombuffer(buf, np.uint8)
    dst = np.empty_like(src)

    def med(fn):
        ts = []
        for _ in range(50):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return float(np.median(ts))

    return {"size_bytes": size, "serialize_ms": med(lambda: serialize_message(m)),
            "deserialize_ms": med(lambda: deserialize_message(buf, Tensor)),
            "memcpy_ms": med(lambda: np.copyto(dst, src))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,2621440,5242880")
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "dds_hop_cpu.json"))
    ap.add_argument("--role", choices=("pub", "sub"), help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, default=2621440, help=argparse.SUPPRESS)
    ap.add_argument("--conversion", default="raw", choices=("raw", "msg"), help=argparse.SUPPRESS)
    ap.add_argument("--type", default="tensor", choices=("tensor", "bounded", "camera"), help=argparse.SUPPRESS)
    ap.add_argument("--build-probe-type", action="store_true", help="only build the bounded probe message")
    args = ap.parse_args(argv)
    if args.build_probe_type:
        ensure_probe_type()
        return 0
    if args.role:
        return (role_pub if args.role == "pub" else role_sub)(args)

    from bevpool_ros.demo.session import isolate

    isolate()
    if any(SETTINGS[s].get("_type") == "bounded" for s in args.settings.split(",")):
        ensure_probe_type()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for setting in args.settings.split(","):
        # every size on the shipped profile; the other settings at the BEV-sized message only
        every_size = setting == "shipped_profile" or SETTINGS[setting].get("_type") == "camera"
        for size in sizes if every_size else [s for s in sizes if s == 2621440] or sizes[:1]:
            for conversion in (("raw", "msg") if every_size and size == 2621440 else ("raw",)):
                r = run_one(setting, size, conversion, args)
                print(json.dumps(r), flush=True)
                rows.append(r)
    res = {"rows": rows, "in_process": [in_process(s) for s in sizes], "cores": os.cpu_count(),
           "load_avg": os.getloadavg(), "command": "python bench/dds_hop.py " + " ".join(argv or sys.argv[1:]),
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res["in_process"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
