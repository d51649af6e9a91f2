"""Hand a set of file descriptors to same-user processes over a Unix socket (SCM_RIGHTS).

Passing the descriptors needs no ptrace rights (unlike pidfd_getfd) and works across
containers sharing the socket's folder. Every client gets one length-prefixed JSON
description plus the descriptors, then the connection closes. Clients of another user are
refused (SO_PEERCRED), and the socket lives in a private 0700 folder.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import threading

MAX_FDS = 256
_LEN = struct.Struct("<I")


class FdPassError(RuntimeError):
    pass


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[2]


class FdServer:
    """Serves ``describe() -> (dict, [fd, ...])`` to every client until closed."""

    def __init__(self, describe, name: str = "ring"):
        self._describe = describe
        self._dir = tempfile.mkdtemp(prefix="bevpool_handoff_")  # 0700, ours
        self.path = os.path.join(self._dir, f"{name}.sock")
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(self.path)
        os.chmod(self.path, 0o600)
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._running = True
        self.refused = 0
        self.served = 0  # descriptions handed out: a producer can tell whether anyone connected
        self._thread = threading.Thread(target=self._loop, name="bevpool-handoff-fds", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while self._running:
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                try:
                    if _peer_uid(conn) != os.getuid():
                        self.refused += 1
                        continue
                    payload, fds = self._describe()
                    data = json.dumps(payload).encode()
                    socket.send_fds(conn, [_LEN.pack(len(data)) + data], list(fds))
                    self.served += 1
                except OSError:
                    continue  # the client went away: nothing to clean up

    def close(self) -> None:
        self._running = False
        self._thread.join(2.0)
        self._sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def fetch(path: str, timeout: float = 5.0) -> tuple[dict, list[int]]:
    """Client: the description and the descriptors (the caller owns and closes them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(path)
        except OSError as e:
            raise FdPassError(f"cannot reach the hand-off producer at {path}: {e}") from None
        data, fds, _, _ = socket.recv_fds(s, 1 << 16, MAX_FDS)
        try:
            if len(data) < _LEN.size:
                raise FdPassError(f"producer at {path} sent no description")
            (n,) = _LEN.unpack_from(data)
            body = data[_LEN.size:]
            while len(body) < n:
                chunk = s.recv(n - len(body))
                if not chunk:
                    raise FdPassError("producer closed the connection mid-description")
                body += chunk
            return json.loads(body[:n]), fds
        except Exception:
            for fd in fds:
                os.close(fd)
            raise
