"""Device memory and events that another process can open: CUDA VMM + POSIX fds, IPC events.

Why these and not cuIpcGetMemHandle: legacy CUDA IPC *memory* handles are not supported on
Tegra (Jetson, DRIVE Thor), while VMM allocations exported as POSIX file descriptors are,
where the device reports it; IPC *events* are supported on both. So the one path used
everywhere is: cuMemCreate(requestedHandleTypes=POSIX_FILE_DESCRIPTOR) ->
cuMemExportToShareableHandle -> (fd over SCM_RIGHTS) -> cuMemImportFromShareableHandle ->
cuMemAddressReserve / cuMemMap / cuMemSetAccess, and cuIpcGetEventHandle / cuIpcOpenEventHandle.
"""
from __future__ import annotations

import os

from ..device.driver import api, check

# device attributes the hand-off needs, and what their absence means
REQUIRED_ATTRIBUTES = {
    "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": "virtual memory management (cuMemCreate)",
    "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": "POSIX file-descriptor memory handles",
    "CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED": "inter-process events",
}


class HandoffUnsupported(RuntimeError):
    """This platform cannot share device memory between processes the way the hand-off needs."""


def unsupported_reason(attributes: dict[str, int], device_name: str = "this GPU") -> str | None:
    """None when every required attribute is set, else a message naming what is missing."""
    missing = [what for name, what in REQUIRED_ATTRIBUTES.items() if not attributes.get(name)]
    if not missing:
        return None
    return (f"output.gpu_handoff needs {', '.join(missing)}, which {device_name} does not report; "
            "legacy CUDA IPC memory handles are not used (unsupported on Tegra). "
            "Use the BevFeature topic instead")


def device_attributes(device) -> dict[str, int]:
    cu = api()
    out = {}
    for name in (*REQUIRED_ATTRIBUTES, "CU_DEVICE_ATTRIBUTE_INTEGRATED"):
        attr = getattr(cu.CUdevice_attribute, name, None)
        out[name] = 0 if attr is None else int(check(cu.cuDeviceGetAttribute(attr, device.dev), name))
    return out


def device_uuid(device) -> bytes:
    return bytes(check(api().cuDeviceGetUuid(device.dev), "cuDeviceGetUuid").bytes)[:16]


def _prop(device):
    cu = api()
    prop = cu.CUmemAllocationProp()
    prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device.ordinal
    prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def granularity(device) -> int:
    cu = api()
    return int(check(cu.cuMemGetAllocationGranularity(
        _prop(device), cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
        "cuMemGetAllocationGranularity"))


def _map(device, handle, size: int) -> int:
    """Reserve an address range, map ``handle`` there, give this device read/write access."""
    cu = api()
    ptr = check(cu.cuMemAddressReserve(size, 0, 0, 0), "cuMemAddressReserve")
    try:
        check(cu.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap")
        access = cu.CUmemAccessDesc()
        access.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        access.location.id = device.ordinal
        access.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        check(cu.cuMemSetAccess(ptr, size, [access], 1), "cuMemSetAccess")
    except Exception:
        cu.cuMemUnmap(ptr, size)
        cu.cuMemAddressFree(ptr, size)
        raise
    return int(ptr)


class SharedDeviceMemory:
    """One mapped VMM allocation; ``fd`` is set on the exporting side only."""

    def __init__(self, device, handle, size: int, fd: int = -1):
        self.device, self.handle, self.size, self.fd = device, handle, int(size), fd
        self.ptr = _map(device, handle, self.size)

    @classmethod
    def create(cls, device, nbytes: int) -> "SharedDeviceMemory":
        cu = api()
        g = granularity(device)
        size = max(g, -(-int(nbytes) // g) * g)
        handle = check(cu.cuMemCreate(size, _prop(device), 0), "cuMemCreate")
        fd = -1
        try:
            fd = int(check(cu.cuMemExportToShareableHandle(
                handle, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                "cuMemExportToShareableHandle"))
            return cls(device, handle, size, fd)
        except Exception:
            cu.cuMemRelease(handle)
            if fd >= 0:
                os.close(fd)
            raise

    @classmethod
    def import_fd(cls, device, fd: int, size: int) -> "SharedDeviceMemory":
        """Consumer side; ``fd`` is closed here (the imported handle keeps the memory alive)."""
        cu = api()
        try:
            handle = check(cu.cuMemImportFromShareableHandle(
                fd, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                "cuMemImportFromShareableHandle")
        finally:
            os.close(fd)
        return cls(device, handle, size)

    def free(self) -> None:
        cu = api()
        if self.ptr:
            cu.cuMemUnmap(self.ptr, self.size)
            cu.cuMemAddressFree(self.ptr, self.size)
            cu.cuMemRelease(self.handle)
            self.ptr = 0
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class IpcEvent:
    """An event another process can wait on (interprocess + timing disabled, as CUDA requires)."""

    def __init__(self, event, owned: bool):
        self.event, self.owned = event, owned

    @classmethod
    def create(cls) -> "IpcEvent":
        cu = api()
        flags = int(cu.CUevent_flags.CU_EVENT_INTERPROCESS) | int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        return cls(check(cu.cuEventCreate(flags), "cuEventCreate(interprocess)"), True)

    @classmethod
    def open(cls, handle: bytes) -> "IpcEvent":
        cu = api()
        h = cu.CUipcEventHandle()
        h.reserved = bytes(handle)
        return cls(check(cu.cuIpcOpenEventHandle(h), "cuIpcOpenEventHandle"), False)

    def handle(self) -> bytes:
        return bytes(check(api().cuIpcGetEventHandle(self.event), "cuIpcGetEventHandle").reserved)

    def record(self, stream_handle) -> None:
        check(api().cuEventRecord(self.event, stream_handle), "cuEventRecord")

    def wait_on(self, stream_handle) -> None:
        check(api().cuStreamWaitEvent(stream_handle, self.event, 0), "cuStreamWaitEvent")

    def synchronize(self) -> None:
        check(api().cuEventSynchronize(self.event), "cuEventSynchronize")

    def destroy(self) -> None:
        if self.event is not None:
            api().cuEventDestroy(self.event)
            self.event = None
