"""The input hand-off's wake-up socket (handoff/signal.py), no GPU needed: datagrams reach a
consumer in another process in order and whole, a consumer that never reads costs the producer
nothing (counted drops, never a blocked send), one that leaves is forgotten."""
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


@pytest.fixture
def server():
    folder = tempfile.mkdtemp(prefix="bevpool_signal_test_")
    s = SignalServer(os.path.join(folder, "signal.sock"))
    yield s
    s.close()
    os.rmdir(folder)


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
    client = SignalClient(sys.argv[1], got.append)
    print("connected", flush=True)
    deadline = time.monotonic() + 20
    while len(got) < int(sys.argv[2]) and time.monotonic() < deadline:
        time.sleep(0.01)
    print(" ".join(d.decode() for d in got), flush=True)
    client.close()
""")


def test_datagrams_reach_a_consumer_process_whole_and_in_order(server):
    proc = subprocess.Popen([sys.executable, "-c", CONSUMER, server.path, "50"],
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
        assert time.monotonic() - t0 < 30  # returned: never waited for the reader
    finally:
        idle.close()


def test_a_client_gets_every_datagram_in_its_thread_and_stops_at_close(server):
    got = []
    client = SignalClient(server.path, got.append)
    assert wait_for(lambda: server.consumers == 1)
    server.send(b"one")
    server.send(b"two")
    assert wait_for(lambda: len(got) == 2) and got == [b"one", b"two"]
    client.close()
    assert not client.connected


def test_connecting_to_no_producer_raises():
    with pytest.raises(OSError):
        SignalClient("/nonexistent/bevpool_handoff/signal.sock", lambda d: None, timeout=0.5)
