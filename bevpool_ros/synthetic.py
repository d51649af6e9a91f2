"""Procedural multi-camera scene: depth distributions and features a real network could emit.

Objects are vertical cylinders on a flat ground plane around the ego vehicle. For every
feature cell of every camera the ray is traced to the nearest surface (object, ground, or
nothing); the depth distribution is a Gaussian over the depth bins around that distance and
the feature vector is the surface's signature. Pooling then puts each object's signature at its
true BEV position, so the BEV image shows the objects where they were placed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rig import Rig
from .scatter_map import frustum_rays


@dataclass(frozen=True)
class SceneObject:
    x: float          # centre, ego frame, metres
    y: float
    radius: float
    height: float
    kind: int         # signature index
    vx: float = 0.0   # velocity, metres per frame
    vy: float = 0.0


DEFAULT_OBJECTS = (
    SceneObject(12.0, 0.5, 1.0, 1.6, 0, vx=0.15),     # car ahead
    SceneObject(-10.0, -3.0, 1.0, 1.6, 0, vx=0.10),   # car behind, next lane
    SceneObject(6.0, 8.0, 0.4, 1.8, 1),                # pedestrian front-left
    SceneObject(-4.0, -9.0, 0.4, 1.8, 1, vy=0.02),     # pedestrian back-right
    SceneObject(25.0, -12.0, 1.5, 3.2, 2),             # truck front-right
    SceneObject(0.0, 15.0, 0.3, 2.5, 3),               # pole left
    SceneObject(-22.0, 10.0, 1.2, 1.6, 0, vx=-0.1),    # car back-left
)
GROUND = -1  # signature index of the ground plane; sky gets no signature


class SyntheticScene:
    """Deterministic frames for ``rig``: ``frame(i) -> (depth [N,D,H,W], feat [N,H,W,C])``."""

    def __init__(self, rig: Rig, seed: int = 0, objects=DEFAULT_OBJECTS, ground_z: float = 0.0,
                 depth_sigma_bins: float = 1.0, noise: float = 0.01):
        self.rig = rig
        self.objects = tuple(objects)
        self.ground_z = ground_z
        self.sigma = depth_sigma_bins
        self.noise = noise
        self.rng_seed = seed
        self.origins, self.rays = frustum_rays(rig)
        rng = np.random.default_rng(seed)
        kinds = max((o.kind for o in self.objects), default=0) + 1
        # unit-norm signatures; the ground is weak so objects stand out in the BEV image
        sig = rng.standard_normal((kinds, rig.channels))
        self.signatures = (sig / np.linalg.norm(sig, axis=1, keepdims=True)).astype(np.float32)
        g = rng.standard_normal(rig.channels)
        self.ground_signature = (0.02 * g / np.linalg.norm(g)).astype(np.float32)

    def object_positions(self, index: int) -> list[tuple[float, float]]:
        return [(o.x + o.vx * index, o.y + o.vy * index) for o in self.objects]

    def hits(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Camera-z depth of the first surface along each ray (inf = none) and its signature id."""
        N, _, H, W = self.rig.depth_shape
        o = self.origins[:, None, None, :]
        r = self.rays
        best = np.full((N, H, W), np.inf)
        kind = np.full((N, H, W), -2, dtype=np.int64)  # -2: sky
        with np.errstate(divide="ignore", invalid="ignore"):
            s_ground = (self.ground_z - o[..., 2]) / r[..., 2]
        ground = np.isfinite(s_ground) & (s_ground > 0)
        best = np.where(ground, s_ground, best)
        kind = np.where(ground, GROUND, kind)
        for obj, (cx, cy) in zip(self.objects, self.object_positions(index)):
            dx, dy = o[..., 0] - cx, o[..., 1] - cy
            a = r[..., 0] ** 2 + r[..., 1] ** 2
            b = 2 * (dx * r[..., 0] + dy * r[..., 1])
            c = dx ** 2 + dy ** 2 - obj.radius ** 2
            disc = b * b - 4 * a * c
            with np.errstate(invalid="ignore", divide="ignore"):
                s = (-b - np.sqrt(disc)) / (2 * a)
            z = o[..., 2] + s * r[..., 2]
            hit = (disc >= 0) & (s > 0) & (z >= self.ground_z) & (z <= self.ground_z + obj.height) & (s < best)
            best = np.where(hit, s, best)
            kind = np.where(hit, obj.kind, kind)
        return best, kind

    def frame(self, index: int = 0) -> tuple[np.ndarray, np.ndarray]:
        rig = self.rig
        dist, kind = self.hits(index)
        bins = rig.depth_values
        # Gaussian over bins around the hit; rays that hit nothing in range spread thinly
        centre = np.clip(dist, bins[0], bins[-1])
        z = (bins[None, :, None, None] - centre[:, None]) / (self.sigma * rig.depth_step)
        logits = -0.5 * z * z
        far = ~np.isfinite(dist) | (dist >= rig.depth_stop)
        logits = np.where(far[:, None], -4.0 * np.ones_like(logits), logits)
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        depth = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)

        feat = np.zeros((*kind.shape, rig.channels), dtype=np.float32)
        obj = kind >= 0
        feat[obj] = self.signatures[kind[obj]]
        feat[kind == GROUND] = self.ground_signature
        rng = np.random.default_rng((self.rng_seed, index))
        feat += self.noise * rng.standard_normal(feat.shape, dtype=np.float32)
        return depth, feat
