"""The pooler's own grid memory, recycled (bevpool_ros/inprocess/grid_memory.py), without a GPU:
BevPooler and the real driver wrappers over test/fake_cuda.py's driver, every call's arguments
logged. A buffer is never lent while a grid holds it; it comes back with an event recorded on
the grid's stream, is reused as it is on that stream and after a device-side wait on another;
extras and leftovers are freed in an order that names no stream that may be gone. The values
(and the device really waiting) are tested on the H200 (test_inprocess_gpu.py)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from fake_cuda import device_inputs, fake_gpu

from bevpool_ros.device.streams import PER_THREAD
from bevpool_ros.inprocess import BevPooler, grid_memory
from bevpool_ros.workloads import get_workload

A, B = 0xA000, 0xB000


@pytest.fixture
def cu():
    with fake_gpu() as fake:
        fake.log = []
        yield fake


@pytest.fixture
def pooler(cu):
    p = BevPooler(get_workload("small"), precision="fp16", backend="cuda")
    yield p
    p.close()


def calls(cu, name):
    return [c[1:] for c in cu.log if c[0] == name]


def pool(p, stream):
    return p.pool(*device_inputs(p.smap), stream=stream)


def test_a_buffer_is_never_lent_while_a_grid_holds_it(cu, pooler):
    """Random holds and releases on two streams: a new grid's memory is never a live grid's,
    and memory is allocated only when none is free."""
    rng = np.random.default_rng(3)
    live = []
    for step in range(300):
        if live and rng.random() < 0.5:
            live.pop(int(rng.integers(len(live)))).release()
            continue
        free_before = pooler._own_grids.free_count
        allocated = cu.calls["cuMemAllocAsync"]
        grid = pool(pooler, (A, B)[int(rng.integers(2))])
        assert grid.ptr not in {g.ptr for g in live}, f"step {step}: memory of a live grid"
        assert cu.calls["cuMemAllocAsync"] == allocated + (free_before == 0)
        live.append(grid)


def test_same_stream_reuse_waits_for_nothing_another_stream_for_the_release(cu, pooler):
    grid = pool(pooler, A)
    ptr = grid.ptr
    cu.log.clear()
    grid = None
    gc.collect()
    (released,) = calls(cu, "cuEventRecord")  # the consumer's work, all enqueued by now
    assert released[1] == A
    event = released[0]
    again = pool(pooler, A)
    assert again.ptr == ptr and not calls(cu, "cuStreamWaitEvent")
    assert not calls(cu, "cuMemAllocAsync")
    again.release()
    cu.log.clear()
    other = pool(pooler, B)
    assert other.ptr == ptr
    assert (B, event, 0) in calls(cu, "cuStreamWaitEvent")  # B runs after A's consumer
    waits = [c[0] for c in cu.log if c[0] in ("cuStreamWaitEvent", "cuGraphLaunch")]
    assert waits[-1] == "cuGraphLaunch"  # every wait before the frame's work


def test_the_per_thread_stream_is_never_taken_for_the_same_one(cu, pooler):
    """Stream 2 names a different stream in each thread: reuse on it always waits."""
    grid = pool(pooler, PER_THREAD)
    cu.log.clear()
    grid.release()
    ((event, _),) = calls(cu, "cuEventRecord")
    assert pool(pooler, PER_THREAD).ptr == grid.ptr
    assert (PER_THREAD, event, 0) in calls(cu, "cuStreamWaitEvent")


def test_more_free_than_kept_are_freed_in_their_stream_order(cu, pooler):
    grids = [pool(pooler, A) for _ in range(grid_memory.KEPT + 2)]
    cu.log.clear()
    for g in grids:
        g.release()
    assert pooler._own_grids.free_count == grid_memory.KEPT
    freed = calls(cu, "cuMemFreeAsync")
    assert [int(s) for _, s in freed] == [A, A]
    assert {p for p, _ in freed} == {g.ptr for g in grids[-2:]}  # the last two found it full


def test_close_frees_the_free_ones_on_the_pooler_stream_after_their_release(cu, pooler):
    for g in [pool(pooler, A), pool(pooler, B)]:
        g.release()
    events = [c[0] for c in calls(cu, "cuEventRecord")[-2:]]
    cu.log.clear()
    pooler.close()
    own = pooler._own_handle
    assert sorted(int(s) for _, s in calls(cu, "cuMemFreeAsync")) == [own, own]
    assert [(own, e, 0) in calls(cu, "cuStreamWaitEvent") for e in events] == [True, True]
    order = [c[0] for c in cu.log if c[0] in ("cuStreamWaitEvent", "cuMemFreeAsync")]
    assert order == ["cuStreamWaitEvent", "cuMemFreeAsync"] * 2


def test_a_grid_released_after_close_frees_its_memory_on_its_stream(cu, pooler):
    grid = pool(pooler, A)
    pooler.close()
    cu.log.clear()
    grid.release()
    ((ptr, stream),) = calls(cu, "cuMemFreeAsync")
    assert ptr == grid.ptr and int(stream) == A
    assert not calls(cu, "cuEventRecord")
    with pytest.raises(RuntimeError, match="closed"):
        pool(pooler, A)


def test_a_failed_enqueue_gives_the_buffer_back(cu, pooler, monkeypatch):
    pool(pooler, A).release()
    assert pooler._own_grids.free_count == 1

    def fails(*args):
        raise RuntimeError("launch failed")

    monkeypatch.setattr(pooler._device, "enqueue", fails)
    with pytest.raises(RuntimeError, match="launch failed"):
        pool(pooler, A)
    assert pooler._own_grids.free_count == 1
    monkeypatch.undo()
    assert pool(pooler, A).check() is not None


def test_a_device_copy_is_one_upload_offered_as_a_cuda_array(cu):
    """driver.DeviceCopy, the benches' and GPU tests' stand-in for a network's output tensor."""
    from bevpool_ros.device.driver import DeviceCopy

    host = np.arange(12, dtype=np.float16).reshape(3, 4)
    copy = DeviceCopy(host)
    uploads = [c for c in cu.log if c[0] == "cuMemcpyHtoD"]
    assert len(uploads) == 1 and uploads[0][1:] == (copy.buf.ptr, host.ctypes.data, host.nbytes)
    face = copy.__cuda_array_interface__
    assert face["shape"] == (3, 4) and face["typestr"] == "<f2" and face["data"] == (copy.buf.ptr, False)
    assert face["version"] == 3 and face["stream"] is None and copy.buf.nbytes == host.nbytes


def test_a_reused_call_slot_cannot_take_a_late_flag_copy_nor_be_freed_under_one(cu, pooler):
    """A grid may be dropped before the device wrote it, giving back a call slot whose flag copy is
    still in flight. Lent again on the same stream, stream order covers it; on another stream the
    call waits for the previous call first (calls are chained), which is the slot's last event;
    close waits on the last call before the pinned words are freed."""
    grid = pool(pooler, A)
    last = int(grid.event.handle)
    grid.release()
    cu.log = []
    same = pool(pooler, A)
    assert int(same.event.handle) == last and not calls(cu, "cuStreamWaitEvent")
    same.release()
    cu.log = []
    other = pool(pooler, B)
    assert int(other.event.handle) == last  # the last slot given back: one frame graph per stream
    names = [c[0] for c in cu.log]
    waited = [i for i, c in enumerate(cu.log) if c[0] == "cuStreamWaitEvent" and c[1] == B
              and int(c[2]) == last]
    work = [i for i, n in enumerate(names) if n in ("cuGraphLaunch", "cuLaunchKernel")]
    assert waited and work and waited[0] < work[0], names
    assert not calls(cu, "cuEventSynchronize")  # no host wait on the way
    other.release()
    cu.log = []
    pooler.close()
    names = [c[0] for c in cu.log]
    assert "cuEventSynchronize" in names and "cuMemFreeHost" in names
    assert names.index("cuEventSynchronize") < names.index("cuMemFreeHost")
