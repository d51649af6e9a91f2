"""DDS domains claimed per graph (demo/domain.py): never shared by two processes on one machine."""
from __future__ import annotations

import subprocess
import sys

from bevpool_ros.demo.domain import DOMAINS, claim_domain, lock_path, release_domain

HOLD = """
import sys, time
from bevpool_ros.demo.domain import claim_domain
print(claim_domain(int(sys.argv[1])), flush=True)
time.sleep(60)
"""


def test_a_process_never_gets_a_domain_it_or_another_process_holds():
    first = claim_domain()
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(first % DOMAINS + 1)],
                             stdout=subprocess.PIPE, text=True)
    try:
        theirs = int(other.stdout.readline())
        assert theirs != first and 1 <= theirs <= DOMAINS
        # asked for theirs, then for ours: each time the next id nobody holds
        got = claim_domain(theirs)
        assert got not in (first, theirs) and 1 <= got <= DOMAINS
        assert claim_domain(first) not in (first, theirs, got)
    finally:
        other.kill()
        other.wait()
    # their lock went with their process: the id is free again
    assert claim_domain(theirs) == theirs
    for d in (first, theirs, got):
        release_domain(d)
    assert claim_domain(first) == first  # released: ours to claim again
    release_domain(first)
    release_domain(first)  # twice, or one never held: nothing


def test_lock_files_live_in_the_temp_folder(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = claim_domain()
    try:
        assert lock_path(d) == str(tmp_path / f"bevpool_ros_domain_{d}.lock")
        assert (tmp_path / f"bevpool_ros_domain_{d}.lock").exists()
    finally:
        release_domain(d)


def test_a_lock_file_left_by_another_user_still_serves(tmp_path, monkeypatch):
    """A file created by someone else (read-only for us) is locked through a read-only descriptor;
    one we may not even read is taken for theirs, never an error."""
    import os
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    d = claim_domain()
    release_domain(d)
    os.chmod(lock_path(d), 0o444)  # as another user's 0644 file looks to us
    assert claim_domain(d) == d
    release_domain(d)
    if os.geteuid() != 0:  # root reads anything: the unreadable case needs a normal user
        os.chmod(lock_path(d), 0o000)
        other = claim_domain(d)
        release_domain(other)
        assert other != d
