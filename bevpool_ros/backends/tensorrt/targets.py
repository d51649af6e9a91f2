"""Build targets: which GPU an engine is built for, and what each TensorRT flavour can do there.

An engine is built for exactly one compute capability (it is part of the cache key, and the
plugin's kernel choice depends on that GPU's L2). Facts (tried 2026-11-30, TensorRT-RTX 1.7.1):
* TensorRT-RTX AOT targets: SM75, SM80, SM86, SM89, SM120, SM121 (no GPU needed to build);
  its runtime refuses compute capability 9.0 (H200), and DRIVE Thor (sm_110) is not a target.
* FP8 E4M3 engines build only for SM89+ (TensorRT-RTX's own error for sm86: "Cannot compile for
  target(s) sm86, because the model contains HW-specific datatypes: fp8_e4m3").
* Full TensorRT builds for the GPU it runs on (DRIVE Thor, desktop).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...regime import KNOWN_GPUS

RTX_AOT_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_89", "sm_120", "sm_121")
RTX_RUNTIME_REFUSED = ("sm_90", "sm_100", "sm_103", "sm_110")
FP8_MIN_CC = 89


class TargetError(ValueError):
    """The requested (arch, precision, TensorRT flavour) combination cannot be built or run."""


def arch_cc(arch: str) -> int:
    """'sm_89' -> 89."""
    if not arch.startswith("sm_") or not arch[3:].isdigit():
        raise TargetError(f"arch: expected 'sm_<NN>', got {arch!r}")
    return int(arch[3:])


def fp8_supported(arch: str) -> bool:
    return arch_cc(arch) >= FP8_MIN_CC


@dataclass(frozen=True)
class Target:
    arch: str            # sm_NN
    l2_bytes: int        # decides the kernel family (regime.classify)
    name: str = ""       # GPU name when known (live device or regime.KNOWN_GPUS)


def known_target(arch: str) -> Target:
    """A target for AOT builds: L2 from regime.KNOWN_GPUS for that arch (first match)."""
    for g in KNOWN_GPUS:
        if g.arch == arch:
            return Target(arch, g.l2_bytes, g.name)
    raise TargetError(f"no known L2 size for {arch}: pass l2_bytes explicitly "
                      f"(known: {sorted({g.arch for g in KNOWN_GPUS})})")


def check_buildable(lib, arch: str, precision: str) -> None:
    """Raise TargetError before TensorRT is asked for something it cannot do."""
    if precision == "fp8" and not fp8_supported(arch):
        raise TargetError(f"fp8 needs compute capability >= {FP8_MIN_CC / 10:.1f}; {arch} has none "
                          "(use fp16)")
    if lib.is_rtx and arch not in RTX_AOT_ARCHS:
        raise TargetError(f"TensorRT-RTX cannot build for {arch} (targets: {', '.join(RTX_AOT_ARCHS)})")


def check_runnable(lib, arch: str) -> None:
    if lib.is_rtx and (arch in RTX_RUNTIME_REFUSED or arch not in RTX_AOT_ARCHS):
        raise TargetError(f"TensorRT-RTX cannot run on {arch} (compute capability {arch_cc(arch) / 10:.1f})")


def rtx_compute_capability(trt, arch: str):
    """TensorRT-RTX enum member for ``arch`` (ComputeCapability.SM89 ...)."""
    member = f"SM{arch_cc(arch)}"
    cc = getattr(getattr(trt, "ComputeCapability", None), member, None)
    if cc is None:
        raise TargetError(f"this TensorRT-RTX has no ComputeCapability.{member}")
    return cc
