"""Read CUDA ELF images (cubins) and the ones a shared library embeds: per kernel its machine
code (.text.<name>) and register count (EIATTR_REGCOUNT of .nv.info), the target SM."""

from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_REGCOUNT = 0x2F
_FORMAT_SIZE = {0x01: 2, 0x02: 3, 0x03: 4}  # EIFMT_NVAL, _BVAL, _HVAL; _SVAL (0x04) has a u16 size


@dataclass(frozen=True)
class Cubin:
    sm: int  # e.g. 90
    code: dict[str, bytes]  # kernel -> .text bytes
    registers: dict[str, int]  # kernel -> registers per thread


def _sections(e: bytes):
    (shoff,) = struct.unpack_from("<Q", e, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", e, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", e, shoff + i * shentsize) for i in range(shnum)]
    strings = headers[shstrndx][4]
    names = [_cstr(e, strings + h[0]) for h in headers]
    return headers, names


def _cstr(e: bytes, at: int) -> str:
    return e[at : e.index(b"\0", at)].decode()


def parse(e: bytes) -> Cubin:
    headers, names = _sections(e)
    (flags,) = struct.unpack_from("<I", e, 0x30)
    code = {
        n[len(".text.") :]: e[h[4] : h[4] + h[5]]
        for n, h in zip(names, headers)
        if n.startswith(".text.")
    }
    sym = headers[names.index(".symtab")]
    strtab = headers[sym[6]][4]
    symbols = [
        _cstr(e, strtab + struct.unpack_from("<I", e, sym[4] + i * 24)[0])
        for i in range(sym[5] // 24)
    ]
    info = headers[names.index(".nv.info")]
    registers, p, end = {}, info[4], info[4] + info[5]
    while p < end:
        fmt, attr = e[p], e[p + 1]
        if fmt == 0x04:
            (size,) = struct.unpack_from("<H", e, p + 2)
            if attr == EIATTR_REGCOUNT:
                index, count = struct.unpack_from("<II", e, p + 4)
                registers[symbols[index]] = count
            p += 4 + size
        else:
            p += _FORMAT_SIZE.get(fmt, 2)
    return Cubin((flags >> 8) & 0xFF, code, registers)


def embedded(blob: bytes) -> dict[int, Cubin]:
    """SM -> cubin for every uncompressed CUDA ELF inside a host binary (its fatbin)."""
    out, at = {}, blob.find(b"\x7fELF", 1)
    while at != -1:
        try:
            c = parse(blob[at:])
            if c.code:
                out[c.sm] = c
        except (struct.error, ValueError, IndexError):
            pass
        at = blob.find(b"\x7fELF", at + 1)
    return out
