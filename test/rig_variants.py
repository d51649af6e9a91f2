"""Valid camera rigs unlike the shipped nuScenes one, for tests of the general case.

Each variant is a rig YAML mapping (the schema of docs/rigs.md), so every test also goes through
the loader a user's file goes through. Cameras stand on a ring around the ego origin looking
outwards (yaw measured from ego +x towards +y); ``pitch_deg`` tilts one down (negative: up).
What varies over the set: 1..8 cameras, per-camera image sizes (the rig's resize and crop scaled to
each, or a camera's own) and intrinsics, resize and crop,
feature strides, depth bins (D = 1..120, steps that are not whole metres), channel counts that
fit no vector width (1, 3, 17, 100) next to wide ones (256, 384), non-square grids, several Z
layers, grids off the ego origin, a camera that sees none of the grid and a rig that sees none.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from bevpool_ros.rig import Rig
from bevpool_ros.rig_yaml import rig_from_dict


def camera_to_ego(yaw_deg: float, pitch_deg: float = 0.0) -> list[list[float]]:
    """Rotation camera (x right, y down, z forward) -> ego (x forward, y left, z up) for a camera
    looking along ``yaw`` in the ego's horizontal plane, tilted down by ``pitch``."""
    yaw, pitch = math.radians(yaw_deg), math.radians(pitch_deg)
    forward = np.array([math.cos(yaw) * math.cos(pitch), math.sin(yaw) * math.cos(pitch), -math.sin(pitch)])
    right = np.array([math.sin(yaw), -math.cos(yaw), 0.0])
    down = np.cross(forward, right)
    return np.stack([right, down, forward], axis=1).tolist()  # columns: camera axes in ego


def camera(name: str, size: tuple[int, int], yaw_deg: float, *, fov_deg: float = 70.0,
           position=(0.0, 0.0, 1.5), pitch_deg: float = 0.0, principal=(0.5, 0.5)) -> dict:
    w, h = size
    fx = (w / 2) / math.tan(math.radians(fov_deg) / 2)
    return {"name": name, "image_size": [w, h],
            "intrinsics": {"fx": fx, "fy": fx * 1.02, "cx": w * principal[0], "cy": h * principal[1]},
            "extrinsics": {"camera_to_ego": [[*row, p] for row, p in zip(camera_to_ego(yaw_deg, pitch_deg), position)]
                           + [[0.0, 0.0, 0.0, 1.0]]}}


def ring(n: int, sizes, *, first_yaw: float = 0.0, radius: float = 1.0, **kw) -> list[dict]:
    """``n`` cameras evenly around the ego, camera i of image size sizes[i % len(sizes)]."""
    cams = []
    for i in range(n):
        yaw = first_yaw + 360.0 * i / n
        pos = (radius * math.cos(math.radians(yaw)), radius * math.sin(math.radians(yaw)), 1.5 + 0.1 * i)
        cams.append(camera(f"cam{i}_{int(yaw) % 360}", sizes[i % len(sizes)], yaw, position=pos, **kw))
    return cams


def spec(name: str, channels: int, cameras: list[dict], *, input_size, resize=1.0, crop=(0, 0), stride=8,
         depth=(1.0, 40.0, 1.0), x=(-25.6, 25.6, 0.8), y=(-25.6, 25.6, 0.8), z=(-3.0, 3.0, 6.0),
         sampling="bevdet", image_size=None) -> dict:
    """``image_size``: the source size resize and crop are written for (default: the first
    camera's); cameras of other sizes get them scaled to their own (same field of view)."""
    return {"name": name, "channels": channels, "feature_stride": stride, "frustum_sampling": sampling,
            "image_size": list(image_size or cameras[0]["image_size"]),
            "input": {"width": input_size[0], "height": input_size[1], "resize": resize, "crop": list(crop)},
            "depth_bins": dict(zip(("start", "stop", "step"), depth)),
            "bev_grid": {"x": list(x), "y": list(y), "z": list(z)}, "cameras": cameras}


# name -> YAML mapping. Small feature maps keep the FP64 reference quick.
VARIANTS: dict[str, dict] = {
    # one camera, one channel, one depth bin, a non-square grid ahead of the ego
    "mono_c1_d1": spec("mono_c1_d1", 1, [camera("front", (320, 240), 0.0, pitch_deg=8.0)],
                       input_size=(320, 240), depth=(4.0, 4.5, 1.0), x=(0.0, 20.0, 0.5), y=(-6.0, 6.0, 0.5)),
    # front and back, odd C, 2 Z layers, half-metre depth steps
    "pair_c3_z2": spec("pair_c3_z2", 3, ring(2, [(640, 360), (720, 400)], pitch_deg=5.0),
                       input_size=(320, 176), resize=0.5, crop=(0, 4), stride=16, depth=(2.0, 37.0, 2.5),
                       x=(-30.0, 30.0, 0.75), y=(-12.0, 12.0, 0.5), z=(-2.0, 4.0, 3.0)),
    # three cameras of three sizes, C = 17, depth step 1.7 m, cell-centre sampling
    "tri_c17": spec("tri_c17", 17, [camera("left", (800, 600), 60.0), camera("front", (1024, 768), 0.0, fov_deg=50),
                                     camera("right", (900, 640), -60.0, principal=(0.45, 0.55))],
                    input_size=(384, 288), resize=0.48, crop=(0, 0), stride=16, depth=(1.3, 57.4, 1.7),
                    x=(-10.0, 50.0, 1.0), y=(-30.0, 30.0, 1.25), sampling="centers"),
    # the node test's first foreign rig: 4 cameras, C = 64, D = 40, 2 Z layers
    "quad_c64_d40_z2": spec("quad_c64_d40_z2", 64, ring(4, [(640, 480)], first_yaw=45.0, fov_deg=90),
                            input_size=(256, 192), resize=0.4, crop=(0, 0), stride=16, depth=(1.0, 41.0, 1.0),
                            x=(-40.0, 40.0, 1.0), y=(-32.0, 32.0, 1.0), z=(-2.0, 2.0, 2.0)),
    # the node test's second foreign rig: one camera, C = 17, 3 Z layers, a grid off to the left
    "solo_c17_z3": spec("solo_c17_z3", 17, [camera("left_wide", (720, 540), 80.0, fov_deg=100, pitch_deg=6.0)],
                        input_size=(288, 216), resize=0.4, crop=(0, 0), stride=12, depth=(0.8, 24.6, 0.85),
                        x=(-12.0, 12.0, 0.6), y=(2.0, 26.0, 0.8), z=(-1.5, 3.0, 1.5)),
    # 5 cameras, D = 120 (0.5 m), a grid off the ego; the rear camera sees none of it
    "penta_c96_d120": spec("penta_c96_d120", 96, ring(5, [(400, 300), (440, 330)], fov_deg=60),
                           input_size=(192, 144), resize=0.48, crop=(0, 0), stride=16, depth=(0.5, 60.5, 0.5),
                           x=(5.0, 55.0, 1.0), y=(-12.5, 37.5, 1.0)),
    # 6 cameras, C = 100 (C % 8 != 0), 4 Z layers of 1.5 m
    "hexa_c100_z4": spec("hexa_c100_z4", 100, ring(6, [(480, 320)], fov_deg=75, pitch_deg=3.0),
                         input_size=(240, 160), resize=0.5, crop=(0, 0), stride=8, depth=(1.0, 25.0, 2.0),
                         x=(-24.0, 24.0, 0.75), y=(-18.0, 18.0, 0.75), z=(-1.0, 5.0, 1.5)),
    # 8 cameras, C = 200, stride 4 on a small input
    "octo_c200": spec("octo_c200", 200, ring(8, [(256, 160), (320, 200)], fov_deg=60),
                      input_size=(128, 80), resize=0.5, crop=(0, 0), stride=4, depth=(1.5, 21.5, 1.25),
                      x=(-20.0, 20.0, 1.0), y=(-20.0, 20.0, 1.0)),
    # 2 cameras side by side, C = 256, 3 Z layers
    "duo_c256_z3": spec("duo_c256_z3", 256, [camera("fl", (512, 256), 20.0), camera("fr", (512, 256), -20.0)],
                        input_size=(256, 128), resize=0.5, crop=(0, 0), stride=16, depth=(2.0, 50.0, 3.0),
                        x=(0.0, 48.0, 1.5), y=(-24.0, 24.0, 1.5), z=(-3.0, 3.0, 2.0)),
    # 3 cameras, C = 384 (two channel chunks on the GPU), coarse grid
    "tri_c384": spec("tri_c384", 384, ring(3, [(320, 240)], fov_deg=100),
                     input_size=(160, 96), resize=0.5, crop=(0, 12), stride=16, depth=(1.0, 31.0, 1.5),
                     x=(-32.0, 32.0, 2.0), y=(-32.0, 32.0, 2.0)),
    # a rig that sees nothing: one camera looking away from a grid behind it (empty scatter map)
    "blind_c80": spec("blind_c80", 80, [camera("back", (320, 240), 180.0, position=(0.0, 0.0, 1.5))],
                      input_size=(320, 240), depth=(1.0, 30.0, 1.0), x=(5.0, 45.0, 1.0), y=(-10.0, 10.0, 1.0)),
}



def mixed_sizes_nuscenes() -> dict:
    """The shipped nuScenes rig with cameras of other sizes, C = 24: CAM_FRONT at 1920x1080 with
    the same field of view (K x 1.2), CAM_BACK at 1280x960 (4:3, the rig's resize scaled by the
    smaller ratio), CAM_BACK_LEFT at 1600x900 with its own resize and crop."""
    d = yaml.safe_load(NUSCENES_RIG.read_text())
    d.update(name="mixed_sizes_nuscenes", channels=24)
    cams = {c["name"]: c for c in d["cameras"]}
    front = cams["CAM_FRONT"]
    front["image_size"] = [1920, 1080]
    front["intrinsics"] = {k: v * 1.2 for k, v in front["intrinsics"].items()}
    back = cams["CAM_BACK"]
    back["image_size"] = [1280, 960]
    back["intrinsics"] = {"fx": back["intrinsics"]["fx"] * 0.8, "cx": 640.0, "cy": 480.0}
    cams["CAM_BACK_LEFT"]["input"] = {"resize": 0.5, "crop": [48, 190]}
    return d


NUSCENES_RIG = Path(__file__).resolve().parent.parent / "config/rigs/nuscenes_bevdet_r50.yaml"
VARIANTS["mixed_sizes_nuscenes"] = mixed_sizes_nuscenes()

# variants whose GPU run exercises the narrow (vec-1 / vec-2) kernels
ODD_CHANNEL_VARIANTS = ("mono_c1_d1", "pair_c3_z2", "tri_c17", "solo_c17_z3")


def rig(name: str) -> Rig:
    return rig_from_dict(VARIANTS[name])


def random_spec(seed: int) -> dict:
    """A valid rig drawn at random: 1..8 cameras of their own sizes, any stride, bins and grid."""
    rng = np.random.default_rng(seed)
    stride = int(rng.choice([4, 8, 16, 32]))
    fw, fh = int(rng.integers(2, 24)), int(rng.integers(2, 16))
    resize = float(rng.choice([0.25, 0.4, 0.5, 1.0]))
    crop = (int(rng.integers(0, 9)), int(rng.integers(0, 9)))
    need = ((fw * stride + crop[0]) / resize, (fh * stride + crop[1]) / resize)  # smallest source image
    sizes = [(int(math.ceil(need[0])) + int(rng.integers(0, 64)), int(math.ceil(need[1])) + int(rng.integers(0, 64)))
             for _ in range(3)]
    n = int(rng.integers(1, 9))
    start = float(rng.uniform(0.3, 3.0))
    step = float(rng.uniform(0.3, 4.0))
    d = int(rng.integers(1, 121))
    axes = {}  # each axis straddles the ego (the cameras stand near it), at its own offset
    for a, layers in (("x", 64), ("y", 64), ("z", 4)):
        cell = float(rng.choice([0.25, 0.5, 0.8, 1.0, 1.6])) * (2 if a == "z" else 1)
        cells = int(rng.integers(1 if a == "z" else 8, layers + 1))
        lower = -cell * cells * float(rng.uniform(0.2, 0.8))
        axes[a] = (lower, lower + cell * cells, cell)
    return spec(f"random{seed}", int(rng.choice([1, 2, 3, 5, 8, 17, 33, 64, 80, 100, 160])),
                ring(n, sizes, first_yaw=float(rng.uniform(0, 360)), fov_deg=float(rng.uniform(40, 110)),
                     pitch_deg=float(rng.uniform(-5, 20))),
                input_size=(fw * stride, fh * stride), resize=resize, crop=crop, stride=stride,
                depth=(start, start + step * (d - 0.5), step), **axes)


def random_rig(seed: int) -> Rig:
    return rig_from_dict(random_spec(seed))


def write_rig(name_or_spec, directory: Path) -> Path:
    """The variant (or a spec mapping) as a YAML file in ``directory``: what a user would write."""
    d = VARIANTS[name_or_spec] if isinstance(name_or_spec, str) else name_or_spec
    path = Path(directory) / f"{d['name']}.yaml"
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def random_inputs(r: Rig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Depth in [0, 1) and features in [-1, 1): the shapes the rig's cameras publish."""
    rng = np.random.default_rng(seed)
    n, d, h, w = r.depth_shape
    return rng.random((n, d, h, w)), rng.uniform(-1, 1, (n, h, w, r.channels))
