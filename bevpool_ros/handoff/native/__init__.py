"""The hand-off's compiled core: per-tensor work of the producer (ring claim, device copy, event
record, announcement patched from its template, datagram fan-out) and of the consumer (signal
sockets, template read, seqlock check, event wait) in one C++ library called through ctypes, with
the GIL released. The Python modules beside it are the reference twin and the fallback (core.py:
``BEVPOOL_NATIVE``)."""
