"""The input hand-off's wake-up socket (handoff/signal.py), no GPU needed: datagrams reach a
consumer in another process in order and whole, a consumer that never reads costs the producer
nothing (counted drops, never a blocked send), one that leaves is forgotten. Each case runs through
both implementations: the Python twin and the hand-off core (native/fanout.py, native/waiter.py)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from bevpool_ros.handoff.signal import SignalClient, SignalServer, signal_path

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def core_or_skip(impl: str):
    """The loaded core for ``impl`` "native" (skipped, with why, where it is not built), None for "python"."""
    if impl == "python":
        return None
    from bevpool_ros.handoff.native.core import library, unavailable_reason

    if library() is None:
        pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
    return library()


@pytest.fixture(params=["python", "native"])
def server(request):
    core_or_skip(request.param)
    folder = tempfile.mkdtemp(prefix="bevpool_signal_test_")
    s = SignalServer(os.path.join(folder, "signal.sock"), native=request.param == "native")
    assert (s.fanout is not None) == (request.param == "native")
    yield s
    s.close()
    os.rmdir(folder)


class WaiterClient:
    """The core's consumer side with SignalClient's face: every datagram (no template learnt: each
    one comes as bytes) to ``on_datagram`` in the waiter's thread."""

    def __init__(self, lib, path, on_datagram, timeout=2.0):
        from bevpool_ros.handoff.native.waiter import SignalWaiter

        self.waiter = SignalWaiter(lib, wait_events=False)
        self.closed = []
        self.link = self.waiter.connect(path, on_values=None, on_raw=lambda data, arrival: on_datagram(data),
                                        on_closed=lambda: self.closed.append(1), timeout=timeout)

    @property
    def connected(self):
        return self.link.connected

    def close(self):
        self.link.close()
        self.waiter.close()


def client(impl, path, on_datagram, timeout=2.0):
    lib = core_or_skip(impl)
    return SignalClient(path, on_datagram, timeout) if lib is None else WaiterClient(lib, path, on_datagram, timeout)


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


def test_the_signal_socket_sits_next_to_the_ring_socket():
    assert signal_path("/tmp/bevpool_handoff_x/ring-1-ab.sock") == "/tmp/bevpool_handoff_x/signal.sock"


CONSUMER = textwrap.dedent("""
    import sys, time
    from bevpool_ros.handoff.signal import SignalClient
    got = []
    if sys.argv[3] == "native":
        sys.path.insert(0, "test")
        from test_handoff_signal import WaiterClient
        from bevpool_ros.handoff.native.core import library
        client = WaiterClient(library(), sys.argv[1], got.append)
    else:
        client = SignalClient(sys.argv[1], got.append)
    print("connected", flush=True)
    deadline = time.monotonic() + 20
    while len(got) < int(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(" ".join(d.decode() for d in got), flush=True)
    client.close()
""")


@pytest.mark.parametrize("consumer", ["python", "native"])
def test_datagrams_reach_a_consumer_process_whole_and_in_order(server, consumer):
    core_or_skip(consumer)
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, server.path, "50", consumer],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "connected"
        assert wait_for(lambda: server.consumers == 1)
        for i in range(50):
            server.send(f"{i}-{'x' * (i * 7)}".encode())
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.split() == [f"{i}-{'x' * (i * 7)}" for i in range(50)]
    assert wait_for(lambda: (server.send(b"ping"), server.consumers)[1] == 0)  # it left: forgotten


def test_a_consumer_that_never_reads_never_blocks_the_producer(server):
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    idle.connect(server.path)
    try:
        assert wait_for(lambda: server.consumers == 1)
        t0 = time.monotonic()
        for _ in range(20000):  # far beyond what the socket buffers hold
            server.send(b"y" * 400)
        assert server.dropped > 0
        # waited for once (signal.FULL_WAIT_S), not once per datagram (20 s)
        assert time.monotonic() - t0 < 5
    finally:
        idle.close()


@pytest.mark.parametrize("consumer", ["python", "native"])
def test_a_client_gets_every_datagram_in_its_thread_and_stops_at_close(server, consumer):
    import threading

    got, threads = [], set()
    c = client(consumer, server.path, lambda d: (got.append(d), threads.add(threading.current_thread().name)))
    assert wait_for(lambda: server.consumers == 1)
    server.send(b"one")
    server.send(b"two")
    server.send(b"z" * 5000)  # longer than MAX_DATAGRAM: cut, as recv(MAX_DATAGRAM) cuts it
    assert wait_for(lambda: len(got) == 3) and got[:2] == [b"one", b"two"] and got[2] == b"z" * 4096
    assert threads == {"bevpool-handoff-wake"}
    c.close()
    assert not c.connected
    assert wait_for(lambda: (server.send(b"ping"), server.consumers)[1] == 0)


@pytest.mark.parametrize("consumer", ["python", "native"])
def test_a_closing_producer_closes_the_link(consumer):
    folder = tempfile.mkdtemp(prefix="bevpool_signal_test_")
    s = SignalServer(os.path.join(folder, "signal.sock"))
    c = client(consumer, s.path, lambda d: None)
    try:
        assert wait_for(lambda: s.consumers == 1)
        s.close()
        assert wait_for(lambda: not c.connected)
    finally:
        c.close()
        os.rmdir(folder)


@pytest.mark.parametrize("consumer", ["python", "native"])
def test_connecting_to_no_producer_raises(consumer):
    with pytest.raises(OSError):
        client(consumer, "/nonexistent/bevpool_handoff/signal.sock", lambda d: None, timeout=0.5)
