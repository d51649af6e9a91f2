"""create_backend: the fallback chain tensorrt -> cuda -> cpu, one warning, no silent swaps."""
from __future__ import annotations

import logging

import pytest

from bevpool_ros.backends import BackendUnavailable, CpuBackend, create_backend
from bevpool_ros.device.driver import live_l2_bytes

NO_GPU = live_l2_bytes() is None


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU fallback")
@pytest.mark.parametrize("name", ["cuda", "tensorrt"])
def test_gpu_backends_fall_back_to_cpu_with_one_warning(name, caplog):
    with caplog.at_level(logging.WARNING, logger="bevpool_ros.backends"):
        backend = create_backend(name, "fp16")
    assert isinstance(backend, CpuBackend)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and name in warnings[0].getMessage() and "cpu" in warnings[0].getMessage()


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_fallback_raises():
    with pytest.raises(BackendUnavailable, match="cuda"):
        create_backend("cuda", "fp16", fallback=False)


def test_best_is_quiet_and_returns_a_backend(caplog):
    with caplog.at_level(logging.WARNING, logger="bevpool_ros.backends"):
        backend = create_backend("best", "fp16")
    assert backend.name in ("tensorrt", "cuda", "cpu")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.gpu
def test_fp32_on_cuda_falls_back_to_cpu():
    # the GPU kernels run fp16/fp8 only: asking cuda for fp32 must land on cpu, not fail
    assert isinstance(create_backend("cuda", "fp32"), CpuBackend)
